package mbus

import (
	"fmt"
	"strings"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Message is one delivery of a published message to one subscription, as
// a Fault sees it.
type Message struct {
	// Subject the message was published on.
	Subject string
	// Subscription is the subject pattern of the receiving subscription.
	Subscription string
	// Data is the payload; a Fault must not modify it.
	Data []byte
}

// FaultAction says what happens to one delivery.
type FaultAction struct {
	// Drop loses the delivery.
	Drop bool
	// Delay holds the delivery back for this long on the runtime clock; it
	// may then arrive after later messages.
	Delay time.Duration
}

// String prints the action, for fault schedules in logs.
func (a FaultAction) String() string {
	switch {
	case a.Drop:
		return "drop"
	case a.Delay > 0:
		return "delay " + a.Delay.String()
	default:
		return "deliver"
	}
}

// Fault decides, per delivery, whether a Memory transport drops or delays it.
type Fault func(Message) FaultAction

// Memory is an in-memory Transport on an rt.Runtime, for the simulator and
// fast tests. Every subscription has its own logical goroutine (started with
// the runtime's Go) that delivers its messages in order, so delivery is
// deterministic under a deterministic runtime. Subscriptions are matched in
// the order they were made.
type Memory struct {
	r rt.Runtime

	mu     rt.Mutex
	subs   []*memSub // guarded by mu; in subscription order
	fault  Fault     // guarded by mu
	closed bool      // guarded by mu
	nextID int       // guarded by mu
}

// NewMemory returns an in-memory transport on r (rt.Real(0) if nil).
func NewMemory(r rt.Runtime) *Memory {
	if r == nil {
		r = rt.Real(0)
	}
	return &Memory{r: r, mu: r.NewMutex()}
}

// SetFault installs f for every later delivery (nil: deliver everything).
func (m *Memory) SetFault(f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fault = f
}

type memSub struct {
	m       *Memory
	id      int
	pattern []string
	subject string
	q       *rt.Queue[delivery]
}

type delivery struct {
	subject string
	data    []byte
}

// Publish implements Transport.
func (m *Memory) Publish(subject string, data []byte) error {
	if err := checkSubject(subject, false); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	var targets []*memSub
	for _, s := range m.subs {
		if matchSubject(s.pattern, subject) {
			targets = append(targets, s)
		}
	}
	fault := m.fault
	m.mu.Unlock()

	for _, s := range targets {
		d := delivery{subject: subject, data: append([]byte(nil), data...)}
		var act FaultAction
		if fault != nil {
			act = fault(Message{Subject: subject, Subscription: s.subject, Data: d.data})
		}
		switch {
		case act.Drop:
		case act.Delay > 0:
			s, delay := s, act.Delay
			m.r.Go("mbus.memory.delay "+subject, func() {
				m.r.Sleep(delay)
				s.q.Push(d)
			})
		default:
			s.q.Push(d)
		}
	}
	return nil
}

// Subscribe implements Transport.
func (m *Memory) Subscribe(subject string, h Handler) (Subscription, error) {
	if err := checkSubject(subject, true); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	m.nextID++
	s := &memSub{m: m, id: m.nextID, pattern: strings.Split(subject, "."), subject: subject, q: rt.NewQueue[delivery](m.r)}
	m.subs = append(m.subs, s)
	m.r.Go("mbus.memory.sub "+subject, func() {
		for {
			d, ok := s.q.Pop(0)
			if !ok {
				return
			}
			h(d.subject, d.data)
		}
	})
	return s, nil
}

// Unsubscribe implements Subscription. Messages already queued are dropped,
// as nats.go drops an async subscription's pending messages; a message
// whose handler is already running finishes.
func (s *memSub) Unsubscribe() error {
	s.m.mu.Lock()
	for i, x := range s.m.subs {
		if x == s {
			s.m.subs = append(s.m.subs[:i:i], s.m.subs[i+1:]...)
			break
		}
	}
	s.m.mu.Unlock()
	s.stop()
	return nil
}

// stop closes the subscription's queue and discards what is left in it
// (rt.Queue.Close alone would let the delivery goroutine drain it).
func (s *memSub) stop() {
	s.q.Close()
	for {
		if _, ok := s.q.Pop(0); !ok {
			return
		}
	}
}

// Close implements Transport. Messages still queued are dropped.
func (m *Memory) Close() error {
	m.mu.Lock()
	subs := m.subs
	m.subs = nil
	m.closed = true
	m.mu.Unlock()
	for _, s := range subs {
		s.stop()
	}
	return nil
}

// checkSubject validates a NATS subject; wildcards only when allowed.
func checkSubject(subject string, wildcards bool) error {
	if subject == "" {
		return fmt.Errorf("mbus: empty subject")
	}
	toks := strings.Split(subject, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n\x00") {
			return fmt.Errorf("mbus: invalid subject %q", subject)
		}
		if t == "*" || t == ">" {
			if !wildcards {
				return fmt.Errorf("mbus: wildcard in publish subject %q", subject)
			}
			if t == ">" && i != len(toks)-1 {
				return fmt.Errorf("mbus: '>' must be the last token in %q", subject)
			}
		}
	}
	return nil
}

// matchSubject reports whether subject matches the tokenised pattern.
func matchSubject(pattern []string, subject string) bool {
	toks := strings.Split(subject, ".")
	for i, p := range pattern {
		if p == ">" {
			return len(toks) > i
		}
		if i >= len(toks) {
			return false
		}
		if p != "*" && p != toks[i] {
			return false
		}
	}
	return len(toks) == len(pattern)
}
