package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cpilab/cpilab/suites"
	"github.com/onsi/ginkgo/v2/types"
)

// progress is the live progress line of a suite run, on stderr.
type progress struct {
	w                io.Writer
	tty              bool
	quiet            bool // --quiet: nothing at all
	pass, fail, skip int
	lastLine         int
	lastPrint        time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, tty: isTerminal(w)}
	if gw, ok := w.(*glyphWriter); ok {
		p.tty = isTerminal(gw.w)
	}
	return p
}

func (p *progress) update(done, total int, sr *types.SpecReport) {
	if p.quiet {
		return
	}
	if sr == nil {
		fmt.Fprintf(p.w, "running %d %s\n", total, suites.Plural(total, "spec", "specs"))
		return
	}
	switch {
	case sr.State.Is(types.SpecStatePassed):
		p.spec(done, total, outcomePassed, sr.FullText())
	case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
		p.spec(done, total, outcomeSkipped, sr.FullText())
	default:
		p.spec(done, total, outcomeFailed, sr.FullText())
	}
}

// The outcomes the progress line counts.
const (
	outcomePassed = iota
	outcomeFailed
	outcomeSkipped
)

// spec counts one finished spec and shows it: in place on a terminal, else
// a line per failure and a summary line every few seconds. total 0: unknown.
func (p *progress) spec(done, total, outcome int, text string) {
	if p.quiet {
		return
	}
	switch outcome {
	case outcomePassed:
		p.pass++
	case outcomeSkipped:
		p.skip++
	default:
		p.fail++
	}
	count := fmt.Sprint(done)
	if total > 0 {
		count = fmt.Sprintf("%d/%d", done, total)
	}
	line := fmt.Sprintf("[%s] ✔ %d  ✘ %d  – %d  %s", count, p.pass, p.fail, p.skip, shorten(text, 70))
	if p.tty {
		pad := max(0, p.lastLine-len([]rune(line)))
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		p.lastLine = len([]rune(line))
		return
	}
	if outcome == outcomeFailed {
		fmt.Fprintf(p.w, "✘ %s\n", text)
	}
	if done == total || time.Since(p.lastPrint) > 5*time.Second {
		fmt.Fprintln(p.w, line)
		p.lastPrint = time.Now()
	}
}

func (p *progress) done() {
	if p.tty && p.lastLine > 0 {
		fmt.Fprintln(p.w)
	}
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Update and Done make the progress line a certifier.Progress.
func (p *progress) Update(done, total int, sr *types.SpecReport) { p.update(done, total, sr) }
func (p *progress) Done()                                        { p.done() }
