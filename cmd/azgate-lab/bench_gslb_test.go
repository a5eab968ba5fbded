package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBenchGSLBFlags: settings both servers cannot express are refused by
// name before anything starts (the benchmark itself runs in
// internal/gslbbench's TestBenchShort), and the serving child needs its
// config.
func TestBenchGSLBFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gslb", "--probe-interval", "1500ms"}, "probe interval 1.5s: must be whole seconds, 2s..255s"},
		{[]string{"gslb", "--probe-interval", "1s"}, "probe interval 1s"},
		{[]string{"gslb", "--probe-timeout", "2s"}, "probe timeout 2s: must be whole seconds, at least 1s and below the interval 2s"},
		{[]string{"gslb", "--probe-fall", "70000"}, "probe fall 70000"},
		{[]string{"gslb-serve"}, `required flag(s) "config" not set`},
		{[]string{"gslb-serve", "--config", "/nonexistent/azgate-serve.json"}, "/nonexistent/azgate-serve.json"},
	} {
		root := newRoot()
		root.SetOut(new(bytes.Buffer))
		root.SetErr(new(bytes.Buffer))
		root.SetArgs(append([]string{"bench"}, tc.args...))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}
