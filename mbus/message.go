package mbus

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the agent message protocol version the Director sends
// (upstream agent_client.rb PROTOCOL_VERSION).
const ProtocolVersion = 3

// Request is a Director → agent message, published on AgentSubject(agent ID).
type Request struct {
	// Protocol is ProtocolVersion.
	Protocol int `json:"protocol"`
	// Method is the agent action, e.g. "ping" or "add_dynamic_disk".
	Method string `json:"method"`
	// Arguments are the action's positional arguments; never null on the wire.
	Arguments []json.RawMessage `json:"arguments"`
	// ReplyTo is "director.<director uuid>.<agent id>.<request id>".
	ReplyTo string `json:"reply_to"`
}

// Reply is an agent → Director message: exactly one of Value and Exception.
type Reply struct {
	// Value is the action's result when it succeeded.
	Value json.RawMessage `json:"value,omitempty"`
	// Exception is set when the action failed.
	Exception *Exception `json:"exception,omitempty"`
}

// Exception is the error member of a Reply.
type Exception struct {
	// Message is the agent's error text, e.g. "unknown message foo".
	Message string `json:"message"`
}

// TaskState is the value of a long-running action's reply until it is done.
type TaskState struct {
	// AgentTaskID identifies the task for get_task.
	AgentTaskID string `json:"agent_task_id"`
	// State is "running" while the task runs.
	State string `json:"state"`
}

// TaskRunning is the State of a task that has not finished.
const TaskRunning = "running"

// ValueReply builds the reply {"value": v}.
func ValueReply(v any) (Reply, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Reply{}, fmt.Errorf("mbus: encoding reply value: %w", err)
	}
	return Reply{Value: b}, nil
}

// ExceptionReply builds the reply {"exception": {"message": msg}}.
func ExceptionReply(msg string) Reply { return Reply{Exception: &Exception{Message: msg}} }

// MarshalJSON writes {"value": null} for an empty reply, so that a reply
// always carries one of its two keys.
func (r Reply) MarshalJSON() ([]byte, error) {
	if r.Exception != nil {
		return json.Marshal(struct {
			Exception *Exception `json:"exception"`
		}{r.Exception})
	}
	v := r.Value
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	return json.Marshal(struct {
		Value json.RawMessage `json:"value"`
	}{v})
}

// RunningTask reports whether a reply value is a long-running task's state
// ({"agent_task_id", "state": "running"}), and returns it.
func RunningTask(value json.RawMessage) (TaskState, bool) {
	if len(value) == 0 || value[0] != '{' {
		return TaskState{}, false
	}
	var t TaskState
	if json.Unmarshal(value, &t) != nil || t.AgentTaskID == "" || t.State != TaskRunning {
		return TaskState{}, false
	}
	return t, true
}

// AgentSubject is the subject an agent listens on: "agent.<agent id>".
func AgentSubject(agentID string) string { return "agent." + agentID }

// ErrBadSubjectToken is wrapped by the error for an agent ID or director UUID
// that cannot be one NATS subject token.
var ErrBadSubjectToken = errors.New("mbus: not a valid subject token")

// CheckToken returns an error unless s can be one token of a subject: not
// empty, no '.', '*', '>', whitespace or control characters, at most 255 bytes.
func CheckToken(what, s string) error {
	if s == "" || len(s) > 255 || strings.ContainsAny(s, ".*> \t\r\n\x00") {
		return fmt.Errorf("%w: %s %q", ErrBadSubjectToken, what, s)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %s %q", ErrBadSubjectToken, what, s)
		}
	}
	return nil
}

// ErrTimeout is matched (errors.Is) by every time-out waiting for an agent.
var ErrTimeout = errors.New("mbus: timed out waiting for the agent")

// ErrUnknownMessage is matched (errors.Is) by an AgentError whose message
// says the agent does not know the method: what an old agent answers to
// add_dynamic_disk, and what the upstream Director's safe_send_message
// swallows.
var ErrUnknownMessage = errors.New("unknown message")

// ErrClosed is returned by a Client or transport used after Close.
var ErrClosed = errors.New("mbus: closed")

// TimeoutError is a request that got no reply in time.
type TimeoutError struct {
	// AgentID and Method name the request that went unanswered.
	AgentID, Method string
	// After is how long the client waited, on its runtime's clock.
	After time.Duration
}

// Error says which agent did not answer what, after how long.
func (e *TimeoutError) Error() string {
	return fmt.Sprintf("mbus: timed out after %s waiting for agent %s to answer %s", e.After, e.AgentID, e.Method)
}

// Is makes a TimeoutError match ErrTimeout.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// AgentError is an exception the agent answered.
type AgentError struct {
	// AgentID and Method name the request the agent refused.
	AgentID, Method string
	// Message is the agent's exception message, verbatim.
	Message string
}

// Error carries the agent's message verbatim.
func (e *AgentError) Error() string {
	return fmt.Sprintf("agent %s: %s: %s", e.AgentID, e.Method, e.Message)
}

// Is makes an AgentError match ErrUnknownMessage when the agent answered
// "unknown message <method>" (upstream handler.UnknownMessage).
func (e *AgentError) Is(target error) bool {
	return target == ErrUnknownMessage && strings.HasPrefix(e.Message, "unknown message")
}

// UnknownMessage is the exception text an agent answers for a method it
// does not know.
func UnknownMessage(method string) string { return "unknown message " + method }
