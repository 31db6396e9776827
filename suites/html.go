package suites

import (
	"html/template"
	"io"
	"time"
)

// HTMLReport is what WriteHTML renders.
type HTMLReport struct {
	Title    string
	Target   string // the CPI command
	Notes    []string
	Started  time.Time
	Duration time.Duration
	Summary  Summary
	Failures []Failure
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"areas": func(s Summary) []string { return s.usedAreas() },
	"cell":  func(r SummaryRow, a string) Cell { return r.Cells[a] },
	"class": func(c Cell) string {
		switch {
		case c.Failed > 0:
			return "fail"
		case c.Passed > 0:
			return "pass"
		case c.Skipped > 0:
			return "skip"
		}
		return "none"
	},
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:center}
th.row,td.row{text-align:left;font-family:monospace}
.pass{background:#d4f4d2}.fail{background:#f8c9c4;font-weight:bold}.skip{background:#eee;color:#777}.none{background:#fff}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;word-break:break-all}
.verdict-pass{color:#176b16}.verdict-fail{color:#a31b0f}
</style></head><body>
<h1>{{.Title}}</h1>
<p>CPI: <code>{{.Target}}</code> — {{.Started.Format "2006-01-02 15:04:05 MST"}}, {{.Duration}}</p>
{{if .Summary.Failed}}<h2 class="verdict-fail">REJECTED: {{.Summary.Failed}} failed</h2>{{else}}<h2 class="verdict-pass">ACCEPTED</h2>{{end}}
<p>{{.Summary.Passed}} passed, {{.Summary.Failed}} failed, {{.Summary.Skipped}} not checked.</p>
{{range .Notes}}<p><em>{{.}}</em></p>{{end}}
<table><tr><th class="row">caller profile × version</th>{{range areas .Summary}}<th>{{.}}</th>{{end}}</tr>
{{$s := .Summary}}{{range .Summary.Rows}}{{$r := .}}<tr><td class="row">{{.Name}}</td>{{range areas $s}}{{$c := cell $r .}}<td class="{{class $c}}">{{$c.Mark}}</td>{{end}}</tr>
{{end}}</table>
<p>✔ passed · ✘ failed · – not checked (see below; never counted as passed)</p>
{{if .Failures}}<h2>Failures</h2>{{range .Failures}}
<h3>{{.Violation.Clause}}</h3>
<p>spec: <code>{{.Spec}}</code></p>
<p>the CPI did instead: {{.Violation.Did}}</p>
{{if .Violation.Request}}<p>request:</p><pre>{{.Violation.Request}}</pre><p>response (exit status {{.Violation.ExitCode}}):</p><pre>{{.Violation.Response}}</pre>{{end}}
{{range .Also}}<p>also broke: {{.Clause}} — {{.Did}}</p>{{end}}
{{if .Rerun}}<p>rerun: <code>{{.Rerun}}</code></p>{{end}}
{{end}}{{end}}
{{if .Summary.NotChecked}}<h2>Not checked</h2><ul>{{range $k, $v := .Summary.NotChecked}}<li>{{$v}} × {{$k}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// WriteHTML writes a self-contained HTML page: the verdict, the matrix of
// caller profile × version rows and areas, each failure with its clause,
// request and response, and what was not checked.
func WriteHTML(w io.Writer, r HTMLReport) error { return htmlTmpl.Execute(w, r) }
