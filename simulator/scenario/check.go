package scenario

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrNotReplayable is wrapped by CheckReplayable's error.
var ErrNotReplayable = errors.New("not a replayable scenario file")

// CheckReplayable reports a scenario file a replay must not pass: one that
// cannot be read or parsed, holds no command named run (an empty file, or
// one cut before its first run), or has a run whose expected output does
// not end with a verdict line ("ok", "violated: …", "error: …"), which is
// what a file cut inside an expected output looks like. The error wraps
// ErrNotReplayable and names the file and line; rewrite is the command that
// fills a file in, for the message.
func CheckReplayable(path, run, rewrite string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReplayable, err)
	}
	f, err := Parse(path, string(data))
	if err != nil {
		return fmt.Errorf("%w: %w (is the file truncated?)", ErrNotReplayable, err)
	}
	runs := 0
	for _, c := range f.Commands() {
		if c.Name != run {
			continue
		}
		runs++
		lines := strings.Split(c.Expected, "\n")
		last := strings.TrimSpace(lines[len(lines)-1])
		if last != "ok" && !strings.HasPrefix(last, "violated: ") && !strings.HasPrefix(last, "error: ") {
			return fmt.Errorf("%w: %s: the expected output of this run ends without a verdict line (ok, violated: …, error: …): "+
				"the file is truncated, or was never filled in (%s fills it in)", ErrNotReplayable, c.Pos, rewrite)
		}
	}
	if runs == 0 {
		what := "empty"
		if len(strings.TrimSpace(string(data))) > 0 {
			what = "only comments and blank lines, or truncated before its first run"
		}
		return fmt.Errorf("%w: %s holds no %s command (%s)", ErrNotReplayable, path, run, what)
	}
	return nil
}
