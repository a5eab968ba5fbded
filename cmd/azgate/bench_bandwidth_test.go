package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchBandwidthJSON: `azgate --json bench bandwidth` prints one JSON
// object per result, each parsing, with the scenario's metrics named and
// the oracle as their baseline; an unknown scenario is refused by name.
func TestBenchBandwidthJSON(t *testing.T) {
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"--json", "bench", "bandwidth", "--scenario", "steps,outage", "--seed", "3", "--loss", "0.05", "--report-delay", "1", "--push-delay", "2"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if r["suite"] != "bandwidth" {
			t.Errorf("suite %v", r["suite"])
		}
		got[r["name"].(string)] = r
	}
	for _, name := range []string{"steps/overshoot-max", "steps/limits-max", "steps/convergence-max", "steps/jain-steady",
		"steps/utilisation-steady", "outage/utilisation-outage", "outage/overshoot-max"} {
		r, ok := got[name]
		if !ok {
			t.Errorf("no %s in %v", name, got)
			continue
		}
		if r["baseline"] != "oracle" {
			t.Errorf("%s: baseline %v", name, r["baseline"])
		}
	}
	if v, _ := got["steps/limits-max"]["value"].(float64); v <= 0.9 || v > 1 {
		t.Errorf("steps/limits-max %v: want (0.9, 1]", v)
	}
	if n, _ := got["steps/overshoot-max"]["note"].(string); !strings.Contains(n, "report delay 1 ticks, push delay 2 ticks per phase, loss 0.05") || !strings.Contains(n, "seed 3") {
		t.Errorf("the note does not say the flags: %q", n)
	}

	root = newRoot()
	root.SetOut(new(bytes.Buffer))
	root.SetErr(new(bytes.Buffer))
	root.SetArgs([]string{"bench", "bandwidth", "--scenario", "nope"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), `scenario "nope"`) {
		t.Errorf("unknown scenario: %v", err)
	}
}
