package suites

import (
	"slices"

	"github.com/onsi/ginkgo/v2/types"
)

// SpecInfo is one spec as List shows it.
type SpecInfo struct {
	// Text is the spec's full text (containers and It), as --focus matches
	// it.
	Text string `json:"text"`
	// Clause is the clause id the spec checks.
	Clause string `json:"clause"`
	// Labels are all the spec's labels (its containers' and its own),
	// sorted.
	Labels []string `json:"labels"`
}

// ListTree is List for any suite RunTree runs: the specs register adds
// that opts select, without running them.
func ListTree(description string, register func(), opts RunOptions) ([]SpecInfo, error) {
	opts.DryRun = true
	opts.Workers = 1
	opts.JSONReport, opts.JUnitReport, opts.Progress = "", "", nil
	r, err := RunTree(description, register, opts)
	if err != nil {
		return nil, err
	}
	return SpecInfos(r, nil), nil
}

// SpecInfos are the specs of a (dry) run's report that were selected,
// each with its clause: the one its text starts with (an id titles knows),
// else its "clause:" label. A pending spec (csi-sanity has one) never
// runs: it is not listed.
func SpecInfos(r types.Report, titles map[string]string) []SpecInfo {
	out := []SpecInfo{}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt || !Ran(sr) || sr.State == types.SpecStatePending {
			continue
		}
		labels := slices.Clone(sr.Labels())
		slices.Sort(labels)
		clause := ClauseIn(sr.LeafNodeText, titles)
		if clause == "" {
			clause = LabelValue(sr, "clause")
		}
		out = append(out, SpecInfo{Text: sr.FullText(), Clause: clause, Labels: slices.Compact(labels)})
	}
	return out
}
