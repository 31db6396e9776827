// Package scenario runs scripted scenario files in the style of etcd's
// datadriven tests: a text file, one command per line with its
// arguments, each followed by its expected output. A registry maps command
// names to handlers; a handler acts on a state shared by the file's commands
// and returns the command's output. A test's own -rewrite flag, passed to
// RunTest, replaces the expected outputs with the actual ones.
//
// A file:
//
//	# two provides of one disk to two VMs
//	provide vm=vm-1 disk=data
//	----
//	ok disk_cid=disk-1
//
//	provide vm=vm-2 disk=data
//	----
//	error: disk data is attached to vm-1
//
// and the test that runs it:
//
//	reg := scenario.NewRegistry[*world]()
//	reg.Register("provide", "provide vm=VM disk=NAME", func(w *world, c *scenario.Command) (string, error) {
//		vm, err := c.Value("vm")
//		…
//	})
//	var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs")
//
//	func TestScenarios(t *testing.T) {
//		files, _ := scenario.Files("testdata")
//		for _, f := range files {
//			t.Run(filepath.Base(f), func(t *testing.T) {
//				scenario.RunTest(t, f, reg, newWorld, *rewrite)
//			})
//		}
//	}
//
// go test ./pkg -run TestScenarios -args -rewrite updates the files.
package scenario
