package suites

import "strings"

// ClauseIn returns the clause id text starts with ("<id>: …") when titles
// knows it, else "".
func ClauseIn(text string, titles map[string]string) string {
	id, _, _ := strings.Cut(text, ":")
	if titles[id] == "" {
		return ""
	}
	return id
}

// TitledClause is "<id>: <title>", as spec names and failures show a
// clause, with the title from titles; the id alone when titles has none.
func TitledClause(id string, titles map[string]string) string {
	if t := titles[id]; t != "" {
		return id + ": " + t
	}
	return id
}

// ClauseText is clause id with its title: the suite's title when the
// report was built from a run, else the title the report's own specs give
// it (a report read back from JSON).
func (c *CertifyReport) ClauseText(id string) string {
	if t := c.titles[id]; t != "" {
		return id + ": " + t
	}
	for _, s := range c.Specs {
		if s.Clause == id && s.ClauseTitle != "" {
			return id + ": " + s.ClauseTitle
		}
	}
	return id
}
