// Package shellword quotes words for a POSIX shell, so that a printed command line runs as printed.
package shellword

import "strings"

// Quote is s as one shell word: as it is when every character is safe
// unquoted, else in single quotes (a single quote inside closes the
// quotes, is escaped with a backslash, and reopens them).
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Join is args as one command line, each quoted.
func Join(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = Quote(a)
	}
	return strings.Join(q, " ")
}
