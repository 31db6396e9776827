package mbus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Client defaults, as the upstream Director has them.
const (
	// DefaultTimeout is the Director's RPC time-out (agent_client.rb).
	DefaultTimeout = 45 * time.Second
	// DefaultPingTimeout is wait_until_ready's per-ping time-out.
	DefaultPingTimeout = 1 * time.Second
	// DefaultTaskPollInterval is the pause between get_task polls.
	DefaultTaskPollInterval = 1 * time.Second
	// DefaultTaskTimeout bounds Run's wait for a long-running task.
	DefaultTaskTimeout = 10 * time.Minute
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// Transport carries the messages (required). The client does not close it.
	Transport Transport
	// Runtime supplies the clock for time-outs and the request-ID stream
	// (default rt.Real(0)).
	Runtime rt.Runtime
	// DirectorUUID is the second token of reply subjects (required; no '.',
	// '*', '>' or whitespace). As each upstream Director process has its
	// own, each Client on one bus needs its own: clients sharing one would
	// see each other's replies and could mistake them for their own.
	DirectorUUID string
	// Timeout bounds Send's wait for a reply (default DefaultTimeout, 45 s).
	Timeout time.Duration
	// PingTimeout bounds one ping of Ping and WaitUntilReady (default 1 s).
	PingTimeout time.Duration
	// TaskPollInterval is the pause between Run's get_task polls (default 1 s).
	TaskPollInterval time.Duration
	// TaskTimeout bounds Run's wait for a running task to finish, on the
	// runtime's clock (default DefaultTaskTimeout, 10 min; negative: no bound).
	TaskTimeout time.Duration
}

// Client is the Director side of the agent protocol: it sends requests to
// agents and waits for their replies on the runtime's clock. It is safe for
// concurrent use.
type Client struct {
	cfg ClientConfig
	r   rt.Runtime
	sub Subscription

	mu      rt.Mutex
	pending map[string]*call // guarded by mu; by request ID
	seq     uint64           // guarded by mu
	closed  bool             // guarded by mu
}

type call struct {
	done   *rt.Event
	reply  []byte // written once before done is set
	closed bool   // set before done by Close: no reply will come
}

// NewClient subscribes to the Director's reply subjects and returns a client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Transport == nil {
		return nil, errors.New("mbus: ClientConfig.Transport is required")
	}
	if err := CheckToken("director UUID", cfg.DirectorUUID); err != nil {
		return nil, err
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.TaskPollInterval <= 0 {
		cfg.TaskPollInterval = DefaultTaskPollInterval
	}
	if cfg.TaskTimeout == 0 {
		cfg.TaskTimeout = DefaultTaskTimeout
	}
	c := &Client{cfg: cfg, r: cfg.Runtime, mu: cfg.Runtime.NewMutex(), pending: map[string]*call{}}
	sub, err := cfg.Transport.Subscribe("director."+cfg.DirectorUUID+".>", c.onReply)
	if err != nil {
		return nil, err
	}
	c.sub = sub
	return c, nil
}

// Close stops listening for replies; calls still waiting fail at once
// with ErrClosed (no reply can reach them any more), so that nothing waits
// on a closed client until its time-out.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	waiting := c.pending
	c.pending = map[string]*call{}
	c.mu.Unlock()
	err := c.sub.Unsubscribe()
	for _, p := range waiting {
		p.closed = true
		p.done.Set()
	}
	return err
}

func (c *Client) onReply(subject string, data []byte) {
	id := subject[lastDot(subject)+1:]
	c.mu.Lock()
	p := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if p == nil {
		return // late or duplicate reply: the caller already gave up
	}
	p.reply = data
	p.done.Set()
}

func lastDot(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return i
		}
	}
	return -1
}

// Send sends method(args...) to the agent and waits up to the configured
// Timeout for its reply. It returns the reply's value; an exception is an
// *AgentError, no reply in time a *TimeoutError (errors.Is ErrTimeout).
// A long-running action's value is its TaskState; Run waits for the result.
func (c *Client) Send(agentID, method string, args ...any) (json.RawMessage, error) {
	return c.SendTimeout(agentID, method, c.cfg.Timeout, args...)
}

// SendTimeout is Send with its own time-out (≤ 0: wait for ever).
func (c *Client) SendTimeout(agentID, method string, timeout time.Duration, args ...any) (json.RawMessage, error) {
	if err := CheckToken("agent ID", agentID); err != nil {
		return nil, err
	}
	raw := make([]json.RawMessage, len(args))
	for i, a := range args {
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("mbus: encoding argument %d of %s: %w", i, method, err)
		}
		raw[i] = b
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	c.seq++
	id := c.requestIDLocked()
	p := &call{done: rt.NewEvent(c.r)}
	c.pending[id] = p
	c.mu.Unlock()

	req, err := json.Marshal(Request{
		Protocol:  ProtocolVersion,
		Method:    method,
		Arguments: raw,
		ReplyTo:   "director." + c.cfg.DirectorUUID + "." + agentID + "." + id,
	})
	if err == nil {
		err = c.cfg.Transport.Publish(AgentSubject(agentID), req)
	}
	if err != nil {
		c.forget(id)
		return nil, fmt.Errorf("mbus: sending %s to agent %s: %w", method, agentID, err)
	}
	if !p.done.Wait(timeout) {
		c.forget(id)
		return nil, &TimeoutError{AgentID: agentID, Method: method, After: timeout}
	}
	if p.closed {
		return nil, fmt.Errorf("mbus: %s to agent %s: %w", method, agentID, ErrClosed)
	}
	return decodeReply(agentID, method, p.reply)
}

// requestIDLocked is a request ID unique within this client: a sequence
// number and a draw from the runtime's "mbus.client" stream.
func (c *Client) requestIDLocked() string {
	return strconv.FormatUint(c.seq, 10) + "-" + strconv.FormatUint(c.r.Rand("mbus.client").Uint64(), 16)
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func decodeReply(agentID, method string, data []byte) (json.RawMessage, error) {
	var r struct {
		Value     json.RawMessage `json:"value"`
		Exception *Exception      `json:"exception"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("mbus: agent %s answered %s with invalid JSON: %w", agentID, method, err)
	}
	if r.Exception != nil {
		return nil, &AgentError{AgentID: agentID, Method: method, Message: r.Exception.Message}
	}
	if r.Value == nil {
		r.Value = json.RawMessage("null")
	}
	return r.Value, nil
}

// Run sends method(args...) and, when the agent answers with a running task,
// polls get_task every TaskPollInterval until the task is done, failed, or
// TaskTimeout has passed. It returns the task's result value.
func (c *Client) Run(agentID, method string, args ...any) (json.RawMessage, error) {
	v, err := c.Send(agentID, method, args...)
	if err != nil {
		return nil, err
	}
	task, ok := RunningTask(v)
	if !ok {
		return v, nil
	}
	start := c.r.Now()
	for {
		if c.cfg.TaskTimeout > 0 && c.r.Now().Sub(start) >= c.cfg.TaskTimeout {
			return nil, &TimeoutError{AgentID: agentID, Method: method + " (task " + task.AgentTaskID + ")", After: c.cfg.TaskTimeout}
		}
		c.r.Sleep(c.cfg.TaskPollInterval)
		v, err := c.Send(agentID, "get_task", task.AgentTaskID)
		if err != nil {
			var ae *AgentError
			if errors.As(err, &ae) {
				// The task failed: report it against the original method.
				return nil, &AgentError{AgentID: agentID, Method: method, Message: ae.Message}
			}
			return nil, err
		}
		if _, running := RunningTask(v); !running {
			return v, nil
		}
	}
}

// Ping sends ping with the ping time-out and checks the answer is "pong".
func (c *Client) Ping(agentID string) error {
	v, err := c.SendTimeout(agentID, "ping", c.cfg.PingTimeout)
	if err != nil {
		return err
	}
	var s string
	if json.Unmarshal(v, &s) != nil || s != "pong" {
		return fmt.Errorf("mbus: agent %s answered ping with %s, want \"pong\"", agentID, v)
	}
	return nil
}

// WaitUntilReady pings the agent until it answers or timeout has passed on
// the runtime's clock, like the Director's wait_until_ready. It returns the
// last error, which matches ErrTimeout when the agent never answered.
func (c *Client) WaitUntilReady(agentID string, timeout time.Duration) error {
	deadline := c.r.Now().Add(timeout)
	for {
		err := c.Ping(agentID)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrBadSubjectToken) {
			return err
		}
		if !c.r.Now().Before(deadline) {
			return fmt.Errorf("mbus: agent %s not ready after %s: %w", agentID, timeout, err)
		}
		if !errors.Is(err, ErrTimeout) {
			// The failure was immediate: pause as a ping would have.
			c.r.Sleep(c.cfg.PingTimeout)
		}
	}
}
