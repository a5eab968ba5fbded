package promcheck

import (
	"reflect"
	"testing"
)

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Fatal(a ...any)            { r.errs = append(r.errs, "fatal") }
func (r *recorder) Fatalf(f string, a ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Skip(a ...any)             { r.TB.Skip(a...) }

// TestLintFlags: Lint fails on what promtool flags (a counter without
// _total, a non-base unit) and passes a clean exposition.
func TestLintFlags(t *testing.T) {
	Promtool(t)
	bad := "# HELP x_milliseconds Bad unit.\n# TYPE x_milliseconds gauge\nx_milliseconds 1\n# HELP y_packets Counter without _total.\n# TYPE y_packets counter\ny_packets 3\n"
	r := &recorder{TB: t}
	Lint(r, []byte(bad))
	if len(r.errs) < 3 { // the exit status and one line per problem
		t.Errorf("Lint of a bad exposition reported %d lines, want >= 3: %q", len(r.errs), r.errs)
	}
	good := "# HELP x_seconds Good.\n# TYPE x_seconds gauge\nx_seconds 1\n# HELP y_packets_total Good.\n# TYPE y_packets_total counter\ny_packets_total{a=\"b\"} 3\n"
	r = &recorder{TB: t}
	Lint(r, []byte(good))
	if len(r.errs) != 0 {
		t.Errorf("Lint of a clean exposition failed: %q", r.errs)
	}
	if got, want := Names([]byte(good)), []string{"x_seconds", "y_packets_total"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
}
