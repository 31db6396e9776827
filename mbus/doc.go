// Package mbus is the BOSH agent message protocol (docs/contracts.md): the
// messages, the transports that carry them, and the Director-side client.
//
// The Director publishes a Request on "agent.<agent id>" with reply_to
// "director.<director uuid>.<agent id>.<request id>"; the agent answers
// {"value": …} or {"exception": {"message": …}}. A long action answers
// {"value": {"agent_task_id", "state": "running"}} and is polled with
// get_task.
//
// Transports: NATS (nats.go; StartEmbedded runs a nats-server in-process on
// 127.0.0.1 and a random port, any external URL works too) and Memory, an
// in-memory transport on an rt.Runtime whose deliveries run as the
// runtime's logical goroutines, with a Fault hook that drops or delays
// messages. The Client waits only through rt primitives, so it replays
// exactly under the simulator's runtime.
//
//	srv, _ := mbus.StartEmbedded(mbus.EmbeddedConfig{})
//	defer srv.Shutdown()
//	tr, _ := mbus.Connect(mbus.NATSConfig{URL: srv.URL()})
//	defer tr.Close()
//	c, _ := mbus.NewClient(mbus.ClientConfig{Transport: tr, DirectorUUID: "d1"})
//	if err := c.WaitUntilReady("agent-1", time.Minute); err != nil { … }
//	v, err := c.Run("agent-1", "add_dynamic_disk", diskCID, hint)
//	if errors.Is(err, mbus.ErrUnknownMessage) { … an old agent … }
package mbus
