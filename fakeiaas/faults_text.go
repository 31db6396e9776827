package fakeiaas

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// String prints the rule in its one-line text form, which ParseRule reads
// back to an equal rule:
//
//	id=r1 op=attach_disk target=vm-… nth=2 prob=0.5 times=1 effect=error type=Bosh::Clouds::DiskNotFound ok_to_retry=true message="boom"
//
// Fields at their zero value are left out; effect is always printed.
func (r Rule) String() string {
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(quoteIfNeeded(v))
	}
	if r.ID != "" {
		add("id", r.ID)
	}
	if r.Op != "" {
		add("op", string(r.Op))
	}
	if r.Target != "" {
		add("target", r.Target)
	}
	if r.Nth != 0 {
		add("nth", strconv.Itoa(r.Nth))
	}
	if r.Prob != 0 {
		add("prob", strconv.FormatFloat(r.Prob, 'g', -1, 64))
	}
	if r.Times != 0 {
		add("times", strconv.Itoa(r.Times))
	}
	add("effect", string(r.Effect.Kind))
	if r.Effect.ErrorType != "" {
		add("type", string(r.Effect.ErrorType))
	}
	if r.Effect.OkToRetry {
		add("ok_to_retry", "true")
	}
	if r.Effect.Message != "" {
		add("message", r.Effect.Message)
	}
	if r.Effect.Delay != 0 {
		add("delay", r.Effect.Delay.String())
	}
	return b.String()
}

func quoteIfNeeded(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"'=\\#") || strconv.Quote(v) != `"`+v+`"` {
		return strconv.Quote(v)
	}
	return v
}

// ParseRule reads one rule in the text form printed by Rule.String. The
// keys are id, op, target, nth, prob, times, effect (required), type,
// ok_to_retry, message and delay (a Go duration, e.g. 250ms). A short error
// type such as DiskNotFound means Bosh::Clouds::DiskNotFound.
func ParseRule(line string) (Rule, error) {
	toks, err := tokenize(line)
	if err != nil {
		return Rule{}, fmt.Errorf("fault rule %q: %w", line, err)
	}
	var r Rule
	seen := map[string]bool{}
	for _, t := range toks {
		k, v := t[0], t[1]
		if seen[k] {
			return Rule{}, fmt.Errorf("fault rule %q: key %q given twice", line, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "id":
			r.ID = v
		case "op":
			r.Op = Op(v)
		case "target":
			r.Target = v
		case "nth":
			r.Nth, err = strconv.Atoi(v)
		case "prob":
			r.Prob, err = strconv.ParseFloat(v, 64)
		case "times":
			r.Times, err = strconv.Atoi(v)
		case "effect":
			r.Effect.Kind = EffectKind(v)
		case "type":
			r.Effect.ErrorType = expandErrorType(v)
		case "ok_to_retry":
			r.Effect.OkToRetry, err = strconv.ParseBool(v)
		case "message":
			r.Effect.Message = v
		case "delay":
			r.Effect.Delay, err = time.ParseDuration(v)
		default:
			return Rule{}, fmt.Errorf("fault rule %q: unknown key %q", line, k)
		}
		if err != nil {
			return Rule{}, fmt.Errorf("fault rule %q: bad %s %q: %w", line, k, v, err)
		}
	}
	if !seen["effect"] {
		return Rule{}, fmt.Errorf("fault rule %q: no effect= given", line)
	}
	if err := r.Validate(); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", line, err)
	}
	return r, nil
}

// ParseRules reads one rule per line; blank lines and lines starting with
// # are skipped.
func ParseRules(text string) ([]Rule, error) {
	var out []Rule
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := ParseRule(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func expandErrorType(v string) cpiv2.ErrorType {
	if v == "" || strings.Contains(v, "::") || v == string(cpiv2.TypeInvalidCall) || v == string(cpiv2.TypeUnknown) {
		return cpiv2.ErrorType(v)
	}
	return cpiv2.ErrorType("Bosh::Clouds::" + v)
}

// tokenize splits `k=v k="quoted v"` into pairs.
func tokenize(s string) ([][2]string, error) {
	var out [][2]string
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			return out, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("expected key=value at %q", s[i:])
		}
		key := s[i : i+eq]
		if strings.ContainsAny(key, " \t\"") {
			return nil, fmt.Errorf("expected key=value at %q", s[i:])
		}
		i += eq + 1
		var val string
		if i < len(s) && s[i] == '"' {
			q, err := strconv.QuotedPrefix(s[i:])
			if err != nil {
				return nil, fmt.Errorf("unterminated quoted value for %q", key)
			}
			val, _ = strconv.Unquote(q)
			i += len(q)
			if i < len(s) && s[i] != ' ' && s[i] != '\t' {
				return nil, fmt.Errorf("text after quoted value for %q", key)
			}
		} else {
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			val = s[i:j]
			if strings.ContainsAny(val, "\"") {
				return nil, fmt.Errorf("stray quote in value for %q", key)
			}
			i = j
		}
		out = append(out, [2]string{key, val})
	}
}
