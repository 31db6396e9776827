package mbus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// startNATS starts an embedded server and a connection to it.
func startNATS(t testing.TB) (*mbus.Embedded, *mbus.NATS) {
	t.Helper()
	srv, err := mbus.StartEmbedded(mbus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if !strings.HasPrefix(srv.URL(), "nats://127.0.0.1:") {
		t.Fatalf("embedded server URL %q, want nats://127.0.0.1:PORT", srv.URL())
	}
	tr, err := mbus.Connect(mbus.NATSConfig{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return srv, tr
}

// fakeAgent answers requests on agent.<id> with answer(method, args).
func fakeAgent(t testing.TB, tr mbus.Transport, id string, answer func(req mbus.Request) mbus.Reply) mbus.Subscription {
	t.Helper()
	sub, err := tr.Subscribe(mbus.AgentSubject(id), func(_ string, data []byte) {
		var req mbus.Request
		if err := json.Unmarshal(data, &req); err != nil {
			t.Errorf("agent got invalid request %s: %v", data, err)
			return
		}
		b, err := json.Marshal(answer(req))
		if err != nil {
			t.Errorf("encoding reply: %v", err)
			return
		}
		_ = tr.Publish(req.ReplyTo, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

func newClient(t testing.TB, tr mbus.Transport, r rt.Runtime) *mbus.Client {
	t.Helper()
	c, err := mbus.NewClient(mbus.ClientConfig{
		Transport: tr, Runtime: r, DirectorUUID: "dir-1",
		Timeout: 2 * time.Second, PingTimeout: 100 * time.Millisecond,
		TaskPollInterval: 5 * time.Millisecond, TaskTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// taskAgent answers like a real agent: ping, "slow" as a task done after
// two polls, "fails" as a task that fails, and unknown message otherwise.
func taskAgent(t *testing.T, requests *[]mbus.Request) func(mbus.Request) mbus.Reply {
	var mu sync.Mutex
	polls := 0
	return func(req mbus.Request) mbus.Reply {
		mu.Lock()
		defer mu.Unlock()
		*requests = append(*requests, req)
		switch req.Method {
		case "ping":
			r, _ := mbus.ValueReply("pong")
			return r
		case "slow", "fails":
			r, _ := mbus.ValueReply(mbus.TaskState{AgentTaskID: "t-" + req.Method, State: mbus.TaskRunning})
			return r
		case "get_task":
			var id string
			if len(req.Arguments) != 1 || json.Unmarshal(req.Arguments[0], &id) != nil {
				return mbus.ExceptionReply("bad get_task arguments")
			}
			polls++
			if id == "t-fails" {
				return mbus.ExceptionReply("disk exploded")
			}
			if polls < 3 {
				r, _ := mbus.ValueReply(mbus.TaskState{AgentTaskID: id, State: mbus.TaskRunning})
				return r
			}
			r, _ := mbus.ValueReply(map[string]string{"done": id})
			return r
		}
		return mbus.ExceptionReply(mbus.UnknownMessage(req.Method))
	}
}

// CONTRACTS §5: request shape, reply value, exceptions, tasks via get_task.
func testClientProtocol(t *testing.T, tr mbus.Transport, r rt.Runtime) {
	var reqs []mbus.Request
	fakeAgent(t, tr, "a1", taskAgent(t, &reqs))
	c := newClient(t, tr, r)

	if err := c.Ping("a1"); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	req := reqs[0]
	if req.Protocol != 3 || req.Method != "ping" || req.Arguments == nil || len(req.Arguments) != 0 {
		t.Errorf("ping request = %+v, want protocol 3, method ping, empty arguments", req)
	}
	if p := strings.Split(req.ReplyTo, "."); len(p) != 4 || p[0] != "director" || p[1] != "dir-1" || p[2] != "a1" || p[3] == "" {
		t.Errorf("reply_to = %q, want director.dir-1.a1.<request id>", req.ReplyTo)
	}

	v, err := c.Run("a1", "slow", "disk-1", map[string]string{"path": "/dev/sdc"})
	if err != nil {
		t.Fatalf("Run slow: %v", err)
	}
	if string(v) != `{"done":"t-slow"}` {
		t.Errorf("Run slow = %s, want the task's result", v)
	}

	_, err = c.Run("a1", "fails")
	var ae *mbus.AgentError
	if !errors.As(err, &ae) || ae.Message != "disk exploded" || ae.Method != "fails" {
		t.Errorf("Run fails: err = %v, want *AgentError{Method: fails, Message: disk exploded}", err)
	}
	if errors.Is(err, mbus.ErrUnknownMessage) {
		t.Errorf("a task failure matched ErrUnknownMessage")
	}

	_, err = c.Send("a1", "add_dynamic_disk", "disk-1", "/dev/sdc")
	if !errors.Is(err, mbus.ErrUnknownMessage) {
		t.Errorf("Send to an agent that does not know the method: err = %v, want ErrUnknownMessage", err)
	}

	_, err = c.SendTimeout("nobody", "ping", 50*time.Millisecond)
	var te *mbus.TimeoutError
	if !errors.Is(err, mbus.ErrTimeout) || !errors.As(err, &te) || te.AgentID != "nobody" {
		t.Errorf("Send to no agent: err = %v, want *TimeoutError for nobody", err)
	}

	if _, err := c.Send("bad.id", "ping"); !errors.Is(err, mbus.ErrBadSubjectToken) {
		t.Errorf("agent ID with a dot: err = %v, want ErrBadSubjectToken", err)
	}
}

func TestClientOverEmbeddedNATS(t *testing.T) {
	_, tr := startNATS(t)
	testClientProtocol(t, tr, rt.Real(1))
}

func TestClientOverMemory(t *testing.T) {
	r := rt.Real(1)
	m := mbus.NewMemory(r)
	t.Cleanup(func() { _ = m.Close() })
	testClientProtocol(t, m, r)
}

// The external-URL path: a second, independent connection to the server.
func TestExternalURL(t *testing.T) {
	srv, agentSide := startNATS(t)
	fakeAgent(t, agentSide, "a2", taskAgent(t, new([]mbus.Request)))
	director, err := mbus.Connect(mbus.NATSConfig{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer director.Close()
	if err := newClient(t, director, rt.Real(2)).Ping("a2"); err != nil {
		t.Fatalf("ping across connections: %v", err)
	}
}

func TestWaitUntilReady(t *testing.T) {
	r := rt.Real(3)
	m := mbus.NewMemory(r)
	defer m.Close()
	c := newClient(t, m, r)

	// Nobody answers: it gives up after the time-out, with ErrTimeout.
	start := time.Now()
	err := c.WaitUntilReady("late", 250*time.Millisecond)
	if !errors.Is(err, mbus.ErrTimeout) {
		t.Fatalf("WaitUntilReady with no agent: %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el < 250*time.Millisecond || el > 2*time.Second {
		t.Errorf("WaitUntilReady gave up after %s, want about 250ms", el)
	}

	// The agent comes up while the director waits.
	ready := make(chan struct{})
	go func() {
		time.Sleep(150 * time.Millisecond)
		fakeAgent(t, m, "late", taskAgent(t, new([]mbus.Request)))
		close(ready)
	}()
	if err := c.WaitUntilReady("late", 5*time.Second); err != nil {
		t.Fatalf("WaitUntilReady: %v", err)
	}
	<-ready
}

func TestMemoryFaults(t *testing.T) {
	r := rt.Real(4)
	m := mbus.NewMemory(r)
	defer m.Close()
	fakeAgent(t, m, "a1", taskAgent(t, new([]mbus.Request)))
	c := newClient(t, m, r)

	var mu sync.Mutex
	var seen []string
	m.SetFault(func(msg mbus.Message) mbus.FaultAction {
		mu.Lock()
		seen = append(seen, msg.Subject)
		mu.Unlock()
		if msg.Subject == "agent.a1" {
			return mbus.FaultAction{Drop: true}
		}
		return mbus.FaultAction{}
	})
	if err := c.Ping("a1"); !errors.Is(err, mbus.ErrTimeout) {
		t.Fatalf("ping with requests dropped: %v, want ErrTimeout", err)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != "agent.a1" {
		t.Errorf("fault saw %v, want one delivery on agent.a1", seen)
	}
	mu.Unlock()

	// Delayed far beyond the ping time-out (100ms): time-out; delayed well
	// within a time-out: pong. The margins are seconds, so a loaded CI
	// machine cannot turn either into the other.
	m.SetFault(func(msg mbus.Message) mbus.FaultAction { return mbus.FaultAction{Delay: 3 * time.Second} })
	if err := c.Ping("a1"); !errors.Is(err, mbus.ErrTimeout) {
		t.Fatalf("ping delayed past its time-out: %v, want ErrTimeout", err)
	}
	m.SetFault(func(msg mbus.Message) mbus.FaultAction { return mbus.FaultAction{Delay: 10 * time.Millisecond} })
	if v, err := c.SendTimeout("a1", "ping", 5*time.Second); err != nil || string(v) != `"pong"` {
		t.Fatalf("ping delayed a little: %s, %v", v, err)
	}
	m.SetFault(nil)
	if got := (mbus.FaultAction{Delay: time.Second}).String(); got != "delay 1s" {
		t.Errorf("FaultAction.String = %q", got)
	}
}

// Unsubscribe and Close drop messages still queued, as NATS does: a handler
// never runs for a message taken off the queue after Unsubscribe returned.
func TestMemoryUnsubscribeDropsQueued(t *testing.T) {
	for _, how := range []string{"unsubscribe", "close"} {
		t.Run(how, func(t *testing.T) {
			r := rt.Real(5)
			m := mbus.NewMemory(r)
			defer m.Close()
			started, release, more := rt.NewEvent(r), rt.NewEvent(r), rt.NewEvent(r)
			var mu sync.Mutex
			var got []string
			sub, err := m.Subscribe("s.>", func(subject string, _ []byte) {
				mu.Lock()
				got = append(got, subject)
				if len(got) > 1 {
					more.Set()
				}
				mu.Unlock()
				started.Set()
				release.Wait(0)
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"s.1", "s.2", "s.3"} {
				if err := m.Publish(s, nil); err != nil {
					t.Fatal(err)
				}
			}
			if !started.Wait(10 * time.Second) {
				t.Fatal("first message never delivered")
			}
			if how == "close" {
				err = m.Close()
			} else {
				err = sub.Unsubscribe()
			}
			if err != nil {
				t.Fatal(err)
			}
			release.Set()
			// A wrongly delivered s.2 would arrive at once; waiting for it
			// can only miss the bug under load, never fail a correct Memory.
			more.Wait(200 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != "s.1" {
				t.Errorf("%s with s.2 and s.3 queued: handler saw %v, want [s.1]", how, got)
			}
		})
	}
}

func TestMemorySubjects(t *testing.T) {
	r := rt.Real(5)
	m := mbus.NewMemory(r)
	got := rt.NewQueue[string](r)
	for _, p := range []string{"a.*", "a.>", "a.b", "x.>"} {
		p := p
		if _, err := m.Subscribe(p, func(s string, _ []byte) { got.Push(p + " " + s) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Publish("a.b", nil); err != nil {
		t.Fatal(err)
	}
	if err := m.Publish("a.b.c", nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"a.* a.b": true, "a.> a.b": true, "a.b a.b": true, "a.> a.b.c": true}
	for n := len(want); n > 0; n-- {
		s, ok := got.Pop(time.Second)
		if !ok || !want[s] {
			t.Fatalf("delivery %q (ok=%v), want one of %v", s, ok, want)
		}
		delete(want, s)
	}
	if s, ok := got.Pop(20 * time.Millisecond); ok {
		t.Errorf("unexpected delivery %q", s)
	}
	for _, bad := range []string{"", "a..b", "a.*", "a.>"} {
		if err := m.Publish(bad, nil); err == nil {
			t.Errorf("Publish(%q) succeeded, want an error", bad)
		}
	}
	if _, err := m.Subscribe("a.>.b", func(string, []byte) {}); err == nil {
		t.Errorf("Subscribe(a.>.b) succeeded, want an error")
	}
	_ = m.Close()
	if err := m.Publish("a.b", nil); !errors.Is(err, mbus.ErrClosed) {
		t.Errorf("Publish after Close: %v, want ErrClosed", err)
	}
}

func TestReplyShapes(t *testing.T) {
	v, _ := mbus.ValueReply("pong")
	for _, c := range []struct {
		r    mbus.Reply
		want string
	}{
		{v, `{"value":"pong"}`},
		{mbus.Reply{}, `{"value":null}`},
		{mbus.ExceptionReply("unknown message foo"), `{"exception":{"message":"unknown message foo"}}`},
	} {
		b, err := json.Marshal(c.r)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", c.r, b, err, c.want)
		}
	}
	if _, ok := mbus.RunningTask(json.RawMessage(`{"agent_task_id":"x","state":"running"}`)); !ok {
		t.Errorf("RunningTask did not recognise a running task")
	}
	if _, ok := mbus.RunningTask(json.RawMessage(`{"agent_task_id":"x","state":"done"}`)); ok {
		t.Errorf("RunningTask took a finished state for running")
	}
	if _, ok := mbus.RunningTask(json.RawMessage(`"pong"`)); ok {
		t.Errorf("RunningTask took a string for a task")
	}
}

// A call waiting for an agent that never answers ends with ErrClosed when
// its client closes, instead of waiting out its time-out (found by the
// adversarial campaign: goroutines left waiting 30 s after a testbed closed).
func TestCloseEndsWaitingCalls(t *testing.T) {
	r := rt.Real(1)
	m := mbus.NewMemory(r)
	defer m.Close()
	c, err := mbus.NewClient(mbus.ClientConfig{Transport: m, Runtime: r, DirectorUUID: "d", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's inbox sees the request once the call is registered as
	// waiting (Send records it before publishing).
	sent := make(chan struct{}, 1)
	if _, err := m.Subscribe(mbus.AgentSubject("silent-agent"), func(string, []byte) {
		select {
		case sent <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Send("silent-agent", "ping")
		done <- err
	}()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the agent's subject")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, mbus.ErrClosed) {
			t.Fatalf("Send after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting call still waits 10 s after Close")
	}
}
