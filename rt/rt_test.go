package rt_test

import (
	"testing"
	"time"

	"github.com/cpilab/cpilab/rt"
)

func TestQueueDeliversInOrderAndTimesOut(t *testing.T) {
	r := rt.Real(1)
	q := rt.NewQueue[int](r)
	g := rt.NewGroup(r)
	g.Go("producer", func() {
		for i := range 100 {
			q.Push(i)
		}
	})
	for want := range 100 {
		got, ok := q.Pop(5 * time.Second)
		if !ok || got != want {
			t.Fatalf("Pop = %d, %v; want %d, true", got, ok, want)
		}
	}
	g.Wait()
	if _, ok := q.Pop(10 * time.Millisecond); ok {
		t.Fatal("Pop on an empty queue reported an item")
	}
	q.Close()
	if _, ok := q.Pop(0); ok {
		t.Fatal("Pop on a closed empty queue reported an item")
	}
}

func TestEventWakesEveryWaiter(t *testing.T) {
	r := rt.Real(1)
	e := rt.NewEvent(r)
	g := rt.NewGroup(r)
	woke := rt.NewQueue[bool](r)
	for range 8 {
		g.Go("waiter", func() { woke.Push(e.Wait(10 * time.Second)) })
	}
	e.Set()
	g.Wait()
	for range 8 {
		if v, ok := woke.Pop(time.Second); !ok || !v {
			t.Fatalf("a waiter was not woken by Set: %v %v", v, ok)
		}
	}
	if rt.NewEvent(r).Wait(time.Millisecond) {
		t.Fatal("an unset event reported set")
	}
}

func TestStreamsAreIndependentAndSeeded(t *testing.T) {
	a, b := rt.Real(7), rt.Real(7)
	x := a.Rand("cpi").Uint64()
	_ = a.Rand("agent").Uint64() // draws on another stream change nothing
	if y := b.Rand("cpi").Uint64(); x != y {
		t.Fatalf("same seed, same stream gave %d and %d", x, y)
	}
	if rt.StreamSeed(7, "cpi") == rt.StreamSeed(7, "agent") {
		t.Fatal("two stream names derived the same seed")
	}
}
