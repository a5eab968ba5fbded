package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Compare reads the JSON output (`azgate-lab bench SUITE --json`) of runs of
// an earlier build (before) and of this one (after), alternated on one
// machine, and reports every result both have: the fastest of the after
// runs, with the fastest of the before runs as BEFORE and the cuts. It is
// the way to compare across versions whose maps changed layout, where
// --baseline-objects cannot load the old objects with this version's Go
// code: each build sets up its own objects (scripts/bench-compare-rev.sh).
// Only ns/packet and instruction-count results are compared (lower is
// better).
func Compare(before, after []string) ([]Result, error) {
	b, _, err := readRuns(before)
	if err != nil {
		return nil, err
	}
	a, order, err := readRuns(after)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, key := range order {
		r := a[key]
		if r.Unit != "ns/packet" && r.Unit != "BPF insns" {
			continue
		}
		// Paths only: the harness and floor rows have no cost above the
		// floor to cut.
		if p, ok := b[key]; ok && (r.Baseline != "" || r.Unit == "BPF insns") {
			r.HasBefore, r.Before, r.BeforeAboveFloor = true, p.Value, p.AboveFloor
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no ns/packet or BPF insns result in the after runs")
	}
	return out, nil
}

// readRuns reads JSON-lines files and keeps, per suite and name, the
// result with the lowest value (noise only adds time), in first-seen order.
func readRuns(files []string) (map[string]Result, []string, error) {
	best := map[string]Result{}
	var order []string
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, nil, err
		}
		err = readResults(fh, func(r Result) {
			key := r.Suite + "\x00" + r.Name
			old, ok := best[key]
			if !ok {
				order = append(order, key)
			}
			if !ok || r.Value < old.Value {
				best[key] = r
			}
		})
		fh.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return best, order, nil
}

func readResults(r io.Reader, fn func(Result)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue // progress messages mixed in
		}
		var j resultJSON
		if err := json.Unmarshal(b, &j); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		res := Result{Suite: j.Suite, Name: j.Name, Value: j.Value, Unit: j.Unit, Baseline: j.Baseline, Note: j.Note}
		if j.BaselineValue != nil {
			res.BaselineValue = *j.BaselineValue
		}
		if j.Ratio != nil {
			res.Ratio = *j.Ratio
		}
		if j.Floor != nil {
			res.PerPacket, res.Floor = true, *j.Floor
			if j.AboveFloor != nil {
				res.AboveFloor = *j.AboveFloor
			}
			if j.Harness != nil {
				res.Harness = *j.Harness
			}
		}
		fn(res)
	}
	return sc.Err()
}
