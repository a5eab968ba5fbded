// Package bench holds azgate's benchmark suites (`azgate-lab bench SUITE`).
// Every result is reported next to a baseline measured in the same run, as
// a ratio: absolute numbers drift on shared machines, ratios much less.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
)

// Result is one line of a suite's output.
type Result struct {
	Suite string
	Name  string
	Value float64
	Unit  string
	// Baseline is what Value is compared with, measured in the same run;
	// Ratio = Value / BaselineValue. Both are in the JSON whenever
	// Baseline is set, zero or not.
	Baseline      string
	BaselineValue float64
	Ratio         float64
	// PerPacket results (ns/packet, BPF_PROG_TEST_RUN) carry the run's
	// harness cost (an XDP_PASS program: the kernel's test loop alone),
	// its floor (MAC swap + XDP_TX) and AboveFloor = Value - Floor, the
	// path's own cost: a ratio of two figures that both carry a large
	// harness cost is squeezed towards 1, a difference is not.
	PerPacket  bool
	Harness    float64
	Floor      float64
	AboveFloor float64
	// HasBefore: the same path measured in the same run with an earlier
	// version's objects (--baseline-objects).
	HasBefore        bool
	Before           float64
	BeforeAboveFloor float64
	// Note says how the figure was made where the name cannot (how a
	// table was filled, what each run varies).
	Note string
	// Target is the goal the issue sets, for people reading the table.
	Target string
}

// CutPct is how much less Value is than Before, in % of Before.
func (r Result) CutPct() float64 { return pct(r.Before-r.Value, r.Before) }

// CutAboveFloorPct is the same for the cost above the floor.
func (r Result) CutAboveFloorPct() float64 {
	return pct(r.BeforeAboveFloor-r.AboveFloor, r.BeforeAboveFloor)
}

func pct(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * a / b
}

// resultJSON is Result as MarshalJSON writes it (and `bench compare`
// reads it back).
type resultJSON struct {
	Suite            string   `json:"suite"`
	Name             string   `json:"name"`
	Value            float64  `json:"value"`
	Unit             string   `json:"unit"`
	Baseline         string   `json:"baseline,omitempty"`
	BaselineValue    *float64 `json:"baseline_value,omitempty"`
	Ratio            *float64 `json:"ratio,omitempty"`
	Harness          *float64 `json:"harness_ns,omitempty"`
	Floor            *float64 `json:"floor_ns,omitempty"`
	AboveFloor       *float64 `json:"above_floor_ns,omitempty"`
	Before           *float64 `json:"before,omitempty"`
	BeforeAboveFloor *float64 `json:"before_above_floor_ns,omitempty"`
	CutPct           *float64 `json:"cut_pct,omitempty"`
	CutAboveFloorPct *float64 `json:"cut_above_floor_pct,omitempty"`
	Note             string   `json:"note,omitempty"`
}

// MarshalJSON writes the fields that apply: baseline_value and ratio
// whenever there is a baseline (a ratio of 0 is a result, not an absent
// one), the harness, floor and above-floor figures for per-packet results,
// the earlier objects' figures and the cuts when they were measured.
func (r Result) MarshalJSON() ([]byte, error) {
	f := func(x float64) *float64 { return &x }
	o := resultJSON{Suite: r.Suite, Name: r.Name, Value: r.Value, Unit: r.Unit, Baseline: r.Baseline, Note: r.Note}
	if r.Baseline != "" {
		o.BaselineValue, o.Ratio = f(r.BaselineValue), f(r.Ratio)
	}
	if r.PerPacket {
		o.Floor, o.AboveFloor = f(r.Floor), f(r.AboveFloor)
		if r.Harness > 0 { // the lab's per-packet figures have none of their own
			o.Harness = f(r.Harness)
		}
	}
	if r.HasBefore {
		o.Before, o.CutPct = f(r.Before), f(r.CutPct())
		if r.PerPacket {
			o.BeforeAboveFloor, o.CutAboveFloorPct = f(r.BeforeAboveFloor), f(r.CutAboveFloorPct())
		}
	}
	return json.Marshal(o)
}

// Report prints results as JSON lines or as a table (notes below it).
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
	perPacket, before := false, false
	for _, r := range rs {
		perPacket = perPacket || r.PerPacket
		before = before || r.HasBefore
	}
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', tabwriter.AlignRight)
	head := "SUITE\tNAME\tVALUE\tUNIT\t"
	if perPacket {
		head += "ABOVE FLOOR\t"
	}
	head += "BASELINE\tBASELINE VALUE\tRATIO\t"
	if before {
		head += "BEFORE\tCUT\tCUT ABOVE FLOOR\t"
	}
	fmt.Fprintln(tw, head+"TARGET\t")
	var notes []string
	for _, r := range rs {
		ratio, bv := "", ""
		if r.Baseline != "" {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
			bv = fmt.Sprintf("%.2f", r.BaselineValue)
		}
		line := fmt.Sprintf("%s\t%s\t%.2f\t%s\t", r.Suite, r.Name, r.Value, r.Unit)
		if perPacket {
			if r.PerPacket {
				line += fmt.Sprintf("%.2f\t", r.AboveFloor)
			} else {
				line += "\t"
			}
		}
		line += fmt.Sprintf("%s\t%s\t%s\t", r.Baseline, bv, ratio)
		if before {
			if r.HasBefore {
				line += fmt.Sprintf("%.2f\t%.1f %%\t", r.Before, r.CutPct())
				if r.PerPacket {
					line += fmt.Sprintf("%.1f %%\t", r.CutAboveFloorPct())
				} else {
					line += "\t"
				}
			} else {
				line += "\t\t\t"
			}
		}
		fmt.Fprintln(tw, line+r.Target+"\t")
		if r.Note != "" {
			notes = append(notes, r.Name+": "+r.Note)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, r := range rs {
		if r.PerPacket && r.Harness > 0 {
			fmt.Fprintf(w, "\nharness (XDP_PASS) %.2f ns/run, floor (MAC swap + XDP_TX) %.2f ns; ABOVE FLOOR = VALUE - floor\n", rs[i].Harness, rs[i].Floor)
			break
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, "note: "+n)
	}
	return nil
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

// percentile is the nearest-rank percentile (the smallest sample with at
// least p % of the samples at or below it): p99 of 100 samples is the 99th
// smallest, of 50 samples the largest. It never interpolates.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
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
