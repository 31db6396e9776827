// Package flex certifies Kubernetes FlexVolume drivers against a BOSH world.
// It installs a driver on the nodes of the world (an embedded reference
// Director, agents and the fake cloud, StartEnv) and calls it as kubelet and
// the attach/detach controller do, checking the clauses of the FlexVolume
// section of docs/contracts.md against the fake cloud's oracle.
//
// As a Ginkgo suite (what `cpilab certify-flex` runs):
//
//	report, err := flex.Run(ctx, flex.RunConfig{Config: flex.Config{Driver: "/path/to/driver"}}, suites.RunOptions{})
//
// or embedded in a go test with flex.Test(t, rc), or check by check
// without Ginkgo (the catalog test shares one world among many drivers):
//
//	env, _ := flex.StartEnv(ctx, flex.EnvConfig{Dir: dir})
//	defer env.Close()
//	s, _ := flex.NewSession(flex.Config{Driver: exe, WorkDir: work}, env)
//	defer s.Close()
//	for _, o := range s.RunAll(ctx) { … o.Violation … }
package flex
