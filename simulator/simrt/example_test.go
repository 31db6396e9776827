package simrt_test

import (
	"fmt"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/simrt"
)

func Example() {
	res := simrt.Run(simrt.Config{Seed: 42, MaxTime: 24 * time.Hour}, func(s *simrt.Sim) {
		q := rt.NewQueue[string](s)
		g := rt.NewGroup(s)
		g.Go("producer", func() {
			s.Sleep(time.Hour) // costs no wall-clock time
			q.Push("hello")
		})
		v, _ := q.Pop(0)
		fmt.Println(v, "at", s.Now().Format(time.TimeOnly))
		g.Wait()
	})
	fmt.Println(res.Outcome, res.Elapsed)
	// Output:
	// hello at 01:00:00
	// completed 1h0m0s
}

func ExampleDeadlockError() {
	res := simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
		mu := s.NewMutex()
		c := s.NewCond(mu)
		mu.Lock()
		c.Wait() // nobody signals
	})
	de := res.Err.(*simrt.DeadlockError)
	fmt.Println(res.Outcome, len(de.Blocked), de.Blocked[0].Name)
	// Output: deadlocked 1 main
}
