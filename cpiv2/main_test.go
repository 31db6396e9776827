package cpiv2_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// testCPI is the path of the test CPI program (internal/testcpi), built once
// by TestMain.
var testCPI string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "cpiv2-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpiv2 tests:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	testCPI = filepath.Join(dir, "testcpi")
	build := exec.Command("go", "build", "-o", testCPI, "./internal/testcpi")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "cpiv2 tests: building the test CPI (go build ./internal/testcpi): %v\n", err)
		return 1
	}
	return m.Run()
}
