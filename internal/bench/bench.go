// Package bench holds azgate's benchmark suites (`azgate bench SUITE`).
// Every result is reported next to a baseline measured in the same run, as
// a ratio: absolute numbers drift on shared machines, ratios much less.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
)

// Result is one line of a suite's output.
type Result struct {
	Suite         string  `json:"suite"`
	Name          string  `json:"name"`
	Value         float64 `json:"value"`
	Unit          string  `json:"unit"`
	Baseline      string  `json:"baseline,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"`
	// Target is the goal the issue sets, for people reading the table.
	Target string `json:"-"`
}

// Report prints results as JSON lines or as a table.
func Report(w io.Writer, rs []Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "SUITE\tNAME\tVALUE\tUNIT\tBASELINE\tBASELINE VALUE\tRATIO\tTARGET\t")
	for _, r := range rs {
		ratio, bv := "", ""
		if r.Baseline != "" {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
			bv = fmt.Sprintf("%.2f", r.BaselineValue)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t\n", r.Suite, r.Name, r.Value, r.Unit, r.Baseline, bv, ratio, r.Target)
	}
	return tw.Flush()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func minOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = min(m, x)
	}
	return m
}
