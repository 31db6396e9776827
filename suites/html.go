package suites

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"cell": func(r MatrixRow, area string) MatrixCell {
		for _, c := range r.Cells {
			if c.Area == area {
				return c
			}
		}
		return MatrixCell{Area: area}
	},
	"class": func(c MatrixCell) string {
		switch {
		case c.Failed > 0:
			return "fail"
		case c.Interrupted > 0:
			return "interrupted"
		case c.Passed > 0:
			return "pass"
		case c.NotChecked > 0:
			return "skip"
		}
		return "none"
	},
	"mark": func(c MatrixCell) string {
		return Cell{Passed: c.Passed, Failed: c.Failed, Skipped: c.NotChecked}.Mark()
	},
	"anchor":  cellAnchor,
	"spec":    func(c *CertifyReport, id string) *SpecResult { return c.Spec(id) },
	"used":    func(c *CertifyReport) []AreaDoc { return usedAreaDocs(c) },
	"upper":   strings.ToUpper,
	"seconds": func(s float64) string { return fmt.Sprintf("%.2f s", s) },
	// whyNotChecked says "not checked: why" once, whether or not the
	// reason already starts with its kind.
	"whyNotChecked": func(why string) string {
		for _, kind := range []string{"not checked", "not applicable", "handled"} {
			if strings.HasPrefix(why, kind) {
				return why
			}
		}
		return "not checked: " + why
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}: {{.Target}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:80em}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:center}
th.row,td.row{text-align:left;font-family:monospace}
td a{color:inherit;text-decoration:none;display:block}
.pass{background:#d4f4d2}.fail{background:#f8c9c4;font-weight:bold}.skip{background:#eee;color:#666}.none{background:#fff}
.interrupted{background:#fde9b5}
pre{background:#f6f6f6;padding:.6em;white-space:pre-wrap;word-break:break-all;font-size:.9em}
.verdict-accepted{color:#176b16}.verdict-rejected,.verdict-nothing-checked,.verdict-interrupted{color:#a31b0f}
dl.legend{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dl.legend dt{font-weight:bold}dl.legend dd{margin:0}
section.cell{border-top:1px solid #ddd;margin-top:1em}
li.spec{margin:.3em 0}
.state{display:inline-block;min-width:6em;font-family:monospace}
</style></head><body>
<h1>{{.Title}}</h1>
<p>{{.TargetKind}}: <code>{{.Target}}</code> · {{.Started.Format "2006-01-02 15:04:05 MST"}} · {{seconds .DurationSeconds}} · {{.Tool.Name}} {{.Tool.Version}} ({{.Tool.Commit}})</p>
<h2 id="verdict" class="verdict-{{.Verdict}}">{{upper .Verdict}}: {{.VerdictReason}}{{if .Partial}} (PARTIAL){{end}}</h2>
{{if .Partial}}<p id="partial"><strong>PARTIAL</strong>: {{.Partial}}; the verdict is about the specs that ran.</p>{{end}}
<p>{{.Counts.Passed}} passed, {{.Counts.Failed}} failed, {{.Counts.NotChecked}} not checked{{if .Counts.NotRun}}, {{.Counts.NotRun}} not run{{end}}{{if .Counts.Warnings}}, {{.Counts.Warnings}} warnings{{end}}{{if .Strict}} (strict: not checked counts as failed){{end}}.</p>
{{range .Notes}}<p><em>{{.}}</em></p>{{end}}
{{if .LeftInCloud}}<p class="fail">Left in the embedded cloud after the run: {{range .LeftInCloud}}<code>{{.}}</code> {{end}}</p>{{end}}
<h2>Matrix</h2>
<table id="matrix"><tr><th class="row">row</th>{{range used .}}<th title="{{.Title}}">{{.ID}}</th>{{end}}</tr>
{{$c := .}}{{range .Matrix}}{{$r := .}}<tr><td class="row">{{.Row}}</td>{{range used $c}}{{$m := cell $r .ID}}<td class="{{class $m}}">{{if $m.Specs}}<a href="#{{anchor $r.Row $m.Area}}">{{mark $m}}</a>{{end}}</td>{{end}}</tr>
{{end}}</table>
<p>{{if eq .TargetKind "CPI"}}Rows: contract contexts <code>&lt;caller profile&gt;.api&lt;version&gt;</code>; reference-table rows <code>d&lt;Director&gt;.c&lt;CPI&gt;.s&lt;stemcell&gt;</code>.{{end}}
Cells: ✔ passed · ✘ failed/total · – not checked (never a pass) · ! interrupted. Each cell links to its specs.</p>
<h2>Areas</h2>
<dl class="legend" id="legend">{{range .Areas}}<dt>{{.ID}}</dt><dd>{{.Title}}</dd>{{end}}</dl>
{{if .NotChecked}}<h2>Not checked (these are not passes)</h2><ul>{{range .NotChecked}}<li>{{.Count}} × {{.Reason}}</li>{{end}}</ul>{{end}}
<h2>Specs by row and area</h2>
{{range .Matrix}}{{$r := .}}{{range .Cells}}<section class="cell" id="{{anchor $r.Row .Area}}"><h3>{{$r.Row}} · {{.Area}}</h3><ul>
{{range .Specs}}{{with spec $c .}}<li class="spec" id="{{.ID}}"><span class="state {{if eq .State "passed"}}pass{{else if eq .State "failed"}}fail{{else if eq .State "interrupted"}}interrupted{{else}}skip{{end}}">{{.State}}</span> {{.Name}}
{{if .Methods}}<br><small>methods called: {{range .Methods}}<code>{{.}}</code> {{end}}</small>{{end}}
{{if eq .State "not-checked"}}<br><small>{{whyNotChecked .Reason}}</small>{{end}}
{{range .Warnings}}<br><small>warning {{.Clause}}: {{.Text}}</small>{{end}}
{{range .Violations}}<p>broke <strong>{{$.ClauseText .Clause}}</strong></p><p>the {{$c.TargetKind}} did instead: {{.Did}}</p>
{{if .Request}}<p>request:</p><pre>{{.Request}}</pre><p>response (exit status {{.ExitCode}}):</p><pre>{{.Response}}</pre>{{end}}{{if .Stderr}}<p>stderr:</p><pre>{{.Stderr}}</pre>{{end}}{{end}}
{{with .Sequence}}<div class="sequence"><p>{{if .Unshrunk}}sequence as found, unshrunk{{else}}shrunk sequence{{end}} ({{len .Steps}} steps), the last broke: <strong>{{.Broke}}</strong></p><ol class="steps">
{{range .Steps}}<li><code>{{.Call}}</code>{{if .Concurrent}} ‖ <code>{{.Concurrent}}</code>{{end}}{{if .Response}}<br><small>→ <code>{{.Response}}</code></small>{{end}}</li>
{{end}}</ol>{{if .Replay}}<p>replay it alone: <code>{{.Replay}}</code></p>{{else if .ReplayFile}}<p>replay file: <code>{{.ReplayFile}}</code></p>{{end}}</div>{{end}}
{{if .Rerun}}<p>rerun: <code>{{.Rerun}}</code></p>{{end}}
</li>{{end}}{{end}}</ul></section>
{{end}}{{end}}
</body></html>
`))

// cellAnchor is the id of a matrix cell's section.
func cellAnchor(row, area string) string {
	return "cell-" + strings.NewReplacer(".", "-", " ", "-").Replace(row) + "-" + area
}

// usedAreaDocs are the areas that have a spec in some row, in Areas order.
func usedAreaDocs(c *CertifyReport) []AreaDoc {
	var out []AreaDoc
	for _, a := range c.Areas {
		for _, r := range c.Matrix {
			found := false
			for _, m := range r.Cells {
				found = found || m.Area == a.ID
			}
			if found {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// WriteHTML writes a self-contained HTML page of a certify report: the
// verdict, the matrix of rows × areas whose cells link to their specs, a
// legend of the areas, what was not checked, and every spec grouped by
// row and area, each failure with its clause, request, response and rerun
// command.
func WriteHTML(w io.Writer, c *CertifyReport) error { return htmlTmpl.Execute(w, c) }
