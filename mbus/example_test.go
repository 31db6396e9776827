package mbus_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// A director-side client talking to a minimal agent over the in-memory
// transport. The same code runs over NATS with mbus.Connect.
func Example() {
	r := rt.Real(1)
	tr := mbus.NewMemory(r)
	defer tr.Close()

	// The agent: answers ping, and nothing else.
	_, _ = tr.Subscribe(mbus.AgentSubject("agent-1"), func(_ string, data []byte) {
		var req mbus.Request
		_ = json.Unmarshal(data, &req)
		reply := mbus.ExceptionReply(mbus.UnknownMessage(req.Method))
		if req.Method == "ping" {
			reply, _ = mbus.ValueReply("pong")
		}
		b, _ := json.Marshal(reply)
		_ = tr.Publish(req.ReplyTo, b)
	})

	c, err := mbus.NewClient(mbus.ClientConfig{Transport: tr, Runtime: r, DirectorUUID: "director-1"})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println(c.WaitUntilReady("agent-1", 10*time.Second))
	_, err = c.Run("agent-1", "add_dynamic_disk", "disk-1", "/dev/sdc")
	fmt.Println(errors.Is(err, mbus.ErrUnknownMessage), err)
	// Output:
	// <nil>
	// true agent agent-1: add_dynamic_disk: unknown message add_dynamic_disk
}
