package mbus

// Handler receives one message. It runs on the transport's delivery
// goroutine; messages for one subscription are delivered one at a time, in
// the order they were published (unless a Memory fault delays one).
type Handler func(subject string, data []byte)

// Subscription is an active subscription; Unsubscribe stops delivery.
type Subscription interface {
	Unsubscribe() error
}

// Transport carries mbus messages. NATS and Memory implement it; the message
// format is the same on both.
type Transport interface {
	// Publish sends data on subject. It does not wait for subscribers.
	Publish(subject string, data []byte) error
	// Subscribe delivers every message on subject (NATS wildcards '*' and
	// '>' allowed) to h until the subscription or transport is closed.
	Subscribe(subject string, h Handler) (Subscription, error)
	// Close ends every subscription and releases the transport.
	Close() error
}
