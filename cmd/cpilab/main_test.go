package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUnknownCommandIsAUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"no-such-command"}, &out, &errb); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "no-such-command"`) {
		t.Fatalf("stderr does not name the unknown command:\n%s", errb.String())
	}
}

func TestNoArgumentsPrintsUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), nil, &out, &errb); code != 2 {
		t.Fatalf("exit status %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "usage: cpilab <command>") {
		t.Fatalf("no usage on stderr:\n%s", errb.String())
	}
}

// A bad flag or a stray argument is a usage error (exit 2), said once, and
// the command does not run.
func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"director", "--no-such-flag"},
		{"certify", "--no-such-flag"},
		{"certify", "stray"},
		{"certify-director", "--no-such-flag"},
		{"agent", "--no-such-flag"},
		{"fakeiaas", "--no-such-flag"},
		{"fakeiaas", "faults", "list", "--no-such-flag"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit status %d, want 2; stderr:\n%s", args, code, errb.String())
		}
		if s := errb.String(); strings.Count(s, "no-such-flag")+strings.Count(s, `"stray"`) != 1 {
			t.Errorf("%q: stderr should name the bad flag or argument once:\n%s", args, s)
		}
	}
	for _, cmd := range []string{"director", "certify", "certify-director", "agent", "fakeiaas"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{cmd, "-h"}, &out, &errb); code != 0 || errb.Len() == 0 {
			t.Errorf("%s -h: exit status %d, want 0 and the flags on stderr; stderr:\n%s", cmd, code, errb.String())
		}
	}
}
