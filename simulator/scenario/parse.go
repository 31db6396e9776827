package scenario

import (
	"fmt"
	"strconv"
	"strings"
)

// File is a parsed scenario file.
type File struct {
	items        []item
	finalNewline bool
}

// item is a command or a line kept verbatim (comment, blank).
type item struct {
	cmd  *Command
	text string
}

// Commands returns the file's commands in order.
func (f *File) Commands() []*Command {
	var out []*Command
	for _, it := range f.items {
		if it.cmd != nil {
			out = append(out, it.cmd)
		}
	}
	return out
}

// Parse reads a scenario file's text; name prefixes positions. The format
// (etcd datadriven's):
//
//	# comment
//	command arg key=value key=(v1, v2) key="quoted value"
//	optional input lines
//	----
//	expected output, up to a blank line
//
//	command
//	----
//	----
//	output that holds a blank line
//
//	goes between doubled separators
//	----
//	----
func Parse(name, text string) (*File, error) {
	f := &File{finalNewline: strings.HasSuffix(text, "\n")}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if text == "" {
		lines = nil
	}
	for i := 0; i < len(lines); {
		line := lines[i]
		trim := strings.TrimSpace(line)
		if trim == "" || strings.HasPrefix(trim, "#") {
			f.items = append(f.items, item{text: line})
			i++
			continue
		}
		c := &Command{Pos: fmt.Sprintf("%s:%d", name, i+1), line: line}
		var err error
		if c.Name, c.Args, err = parseLine(trim); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Pos, err)
		}
		i++
		var input []string
		for i < len(lines) && lines[i] != Separator {
			input = append(input, lines[i])
			i++
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s: command %q has no %q line before its expected output", c.Pos, c.Name, Separator)
		}
		c.Input = strings.Join(input, "\n")
		i++ // the separator
		var expected []string
		if i < len(lines) && lines[i] == Separator {
			i++
			for {
				if i+1 >= len(lines) {
					return nil, fmt.Errorf("%s: output of %q opened with a double %q is not closed by one", c.Pos, c.Name, Separator)
				}
				if lines[i] == Separator && lines[i+1] == Separator {
					i += 2
					break
				}
				expected = append(expected, lines[i])
				i++
			}
		} else {
			for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
				expected = append(expected, lines[i])
				i++
			}
		}
		c.Expected = strings.Join(expected, "\n")
		f.items = append(f.items, item{cmd: c})
	}
	return f, nil
}

// parseLine splits a command line into its name and arguments.
func parseLine(line string) (string, []Arg, error) {
	toks, err := SplitWords(line)
	if err != nil {
		return "", nil, err
	}
	name := toks[0]
	if strings.ContainsAny(name, "=()\"") {
		return "", nil, fmt.Errorf("command name %q may not hold = ( ) or quotes", name)
	}
	var args []Arg
	for _, tok := range toks[1:] {
		key, val, hasVal := strings.Cut(tok, "=")
		if key == "" {
			return "", nil, fmt.Errorf("argument %q has no key", tok)
		}
		a := Arg{Key: key}
		if hasVal {
			if strings.HasPrefix(val, "(") {
				if !strings.HasSuffix(val, ")") {
					return "", nil, fmt.Errorf("argument %q: unclosed (", tok)
				}
				inner := strings.TrimSpace(val[1 : len(val)-1])
				a.Vals = []string{}
				if inner != "" {
					parts, err := splitList(inner)
					if err != nil {
						return "", nil, fmt.Errorf("argument %q: %w", tok, err)
					}
					a.Vals = parts
				}
			} else {
				v, err := Unquote(val)
				if err != nil {
					return "", nil, fmt.Errorf("argument %q: %w", tok, err)
				}
				a.Vals = []string{v}
			}
		}
		args = append(args, a)
	}
	return name, args, nil
}

// SplitWords splits a line into words on spaces and tabs outside Go-quoted
// strings and parentheses, keeping quotes and parentheses in the words: the
// one tokenizer of cpilab's line formats (scenario commands, fault lines).
func SplitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	depth, inQuote, esc := 0, false, false
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		switch {
		case inQuote:
			cur.WriteRune(r)
			if esc {
				esc = false
			} else if r == '\\' {
				esc = true
			} else if r == '"' {
				inQuote = false
			}
		case r == '"':
			inQuote = true
			cur.WriteRune(r)
		case r == '(':
			depth++
			cur.WriteRune(r)
		case r == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ) in %q", s)
			}
			cur.WriteRune(r)
		case (r == ' ' || r == '\t') && depth == 0:
			flush()
		default:
			cur.WriteRune(r)
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed ( in %q", s)
	}
	flush()
	return out, nil
}

// splitList splits "a, b, \"c, d\"" on commas outside quotes and unquotes
// each trimmed part.
func splitList(s string) ([]string, error) {
	parts, err := SplitOutside(s, ',')
	if err != nil {
		return nil, err
	}
	out := make([]string, len(parts))
	for i, part := range parts {
		if out[i], err = Unquote(strings.TrimSpace(part)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SplitOutside splits s on sep where sep is outside a double-quoted
// string (Go syntax, backslash escapes), keeping the quotes in the parts:
// the list and schedule separator of cpilab's line formats.
func SplitOutside(s string, sep rune) ([]string, error) {
	var parts []string
	start, inQuote, esc := 0, false, false
	for i, r := range s {
		switch {
		case inQuote:
			if esc {
				esc = false
			} else if r == '\\' {
				esc = true
			} else if r == '"' {
				inQuote = false
			}
		case r == '"':
			inQuote = true
		case r == sep:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	return append(parts, s[start:]), nil
}

// Unquote reads a value as written in a line: a Go double-quoted string
// is unquoted, anything else is taken as it is.
func Unquote(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		return strconv.Unquote(v)
	}
	return v, nil
}

// KeyValues reads words of the form key=value, as the fault lines of the
// simulations write them: each key at most once, each value unquoted
// (Unquote). It calls set with each pair in order, stops at the first error
// (of the form or of set), and returns the keys it read.
func KeyValues(words []string, set func(key, value string) error) (map[string]bool, error) {
	seen := make(map[string]bool, len(words))
	for _, kv := range words {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return seen, fmt.Errorf("want key=value, got %q", kv)
		}
		if seen[k] {
			return seen, fmt.Errorf("key %q given twice", k)
		}
		seen[k] = true
		v, err := Unquote(v)
		if err != nil {
			return seen, fmt.Errorf("key %s: %w", k, err)
		}
		if err := set(k, v); err != nil {
			return seen, err
		}
	}
	return seen, nil
}
