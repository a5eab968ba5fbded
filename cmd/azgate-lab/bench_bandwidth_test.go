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
	if n, _ := got["steps/overshoot-max"]["note"].(string); !strings.Contains(n, "report delay 1 ticks, push delay 2 ticks (round to hosts), loss 0.05") || !strings.Contains(n, "seed 3") {
		t.Errorf("the note does not say the flags: %q", n)
	}

	// The table: a header, a line per figure, the notes.
	root = newRoot()
	out.Reset()
	root.SetOut(&out)
	root.SetErr(new(bytes.Buffer))
	root.SetArgs([]string{"bench", "bandwidth", "--scenario", "flash"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SUITE", "flash/utilisation-steady", "oracle", ">= 95", "note: flash/overshoot-max: 1G package"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "nope"}, `scenario "nope"`},
		{[]string{"--scale-packages", "20000"}, "--scale-packages 20000: at most 13107"},
		{[]string{"--push-delay", "5"}, "push delay 5 ticks"},
	} {
		root = newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetErr(new(bytes.Buffer))
		root.SetArgs(append([]string{"bench", "bandwidth"}, tc.args...))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
