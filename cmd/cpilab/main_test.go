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
