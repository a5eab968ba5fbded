package pathd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// forward POSTs reports to n's /v1/forward with token and returns the
// reply (200 required).
func (n *node) forward(token string, fs ...fwdReport) ReportsReply {
	n.t.Helper()
	code, b := do(n.t, "POST", n.url+"/v1/forward", token, mustJSON(n.t, fs))
	if code != 200 {
		n.t.Fatalf("POST /v1/forward: %d %s", code, b)
	}
	var r ReportsReply
	if err := json.Unmarshal(b, &r); err != nil {
		n.t.Fatal(err)
	}
	return r
}

// TestForgedSequenceCannotMute reproduces issue 17 part 3's first attack
// through the real HTTP server: region ap, holding its own peer token,
// forwards a report under one of region us's sources with sequence
// 2^64−1. With one token for every region that was taken, and us's next
// reports were all dropped as duplicates (the source muted). Now eu takes
// a forward only for sources of the region whose token sent it, and even
// us's own token cannot jump a source's sequence beyond the window.
func TestForgedSequenceCannotMute(t *testing.T) {
	eu := startNode(t, Config{Region: "eu"})
	usTok, apTok := pairTok("eu", "us"), pairTok("eu", "ap")
	base := time.Now().Add(-time.Minute)
	rep := func(seq uint64, i int) fwdReport {
		return fwdReport{ID: pathcomp.ReportID{Source: "us/s1-0001", Seq: seq}, M: m("us-edge", "origin", true, ms, 0, base.Add(time.Duration(i)*time.Second))}
	}
	if r := eu.forward(usTok, rep(1, 1)); r.Applied != 1 {
		t.Fatalf("us's first report: %+v", r)
	}
	// ap forges us's source.
	if r := eu.forward(apTok, rep(1<<64-1, 2)); r.Applied != 0 || r.Rejected != 1 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "not of region ap") {
		t.Errorf("ap forging us's source: %+v, want rejected naming region ap", r)
	}
	// us's own token (a compromised server of us) cannot jump it either.
	if r := eu.forward(usTok, rep(1<<64-1, 3)); r.Applied != 0 || r.Rejected != 1 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "too far ahead") {
		t.Errorf("us jumping its own source's sequence: %+v, want rejected (too far ahead)", r)
	}
	// us's next reports are still taken: the source is not muted.
	for i, seq := range []uint64{2, 3, 3 + pathcomp.SeqAhead} {
		if r := eu.forward(usTok, rep(seq, 10+i)); r.Applied != 1 || r.Duplicate != 0 {
			t.Errorf("us's report seq %d after the forgeries: %+v, want applied", seq, r)
		}
	}
	// ap's own sources are still taken from ap.
	if r := eu.forward(apTok, fwdReport{ID: pathcomp.ReportID{Source: "ap/s1-0001", Seq: 1}, M: m("ap-edge", "origin", true, ms, 0, base)}); r.Applied != 1 {
		t.Errorf("ap's own source: %+v, want applied", r)
	}
	if l := metricLine(eu.metrics(), "azgate_pathd_forward_wrong_region_total"); l != "azgate_pathd_forward_wrong_region_total 1" {
		t.Errorf("metric: %q", l)
	}
}

// TestSourceFloodCannotLockOut reproduces issue 17 part 3's second
// attack through the real HTTP server: region ap fills the duplicate
// filter's table with 4,096 sources of its own. With one table for all
// regions that locked out every new source of every region (us's server
// restarting takes a new source name, so us went unheard until ap's
// sources expired). Now each origin region has its own table: ap fills
// only its own.
func TestSourceFloodCannotLockOut(t *testing.T) {
	eu := startNode(t, Config{Region: "eu"})
	usTok, apTok := pairTok("eu", "us"), pairTok("eu", "ap")
	base := time.Now().Add(-time.Minute)
	const bound = 4096 // NewDedup's default, per origin region
	flood := func(from, to int) []fwdReport {
		var fs []fwdReport
		for i := from; i < to; i++ {
			fs = append(fs, fwdReport{ID: pathcomp.ReportID{Source: fmt.Sprintf("ap/flood-%d", i), Seq: 1}, M: m("ap-edge", "origin", true, ms, 0, base)})
		}
		return fs
	}
	taken := 0
	for i := 0; i < bound; i += 1000 {
		r := eu.forward(apTok, flood(i, min(i+1000, bound))...)
		taken += r.Applied + r.Stale
	}
	if taken != bound {
		t.Fatalf("ap's %d sources: %d taken", bound, taken)
	}
	if r := eu.forward(apTok, flood(bound, bound+1)...); r.Rejected != 1 || !strings.Contains(r.Errors[0], "too many sources") {
		t.Errorf("ap's source %d: %+v, want rejected (too many sources)", bound+1, r)
	}
	// A new source of us (a restarted server) is still taken.
	if r := eu.forward(usTok, fwdReport{ID: pathcomp.ReportID{Source: "us/s1-0002", Seq: 1}, M: m("us-edge", "origin", true, ms, 0, base)}); r.Applied != 1 {
		t.Errorf("us's new source with ap's table full: %+v, want applied", r)
	}
	metrics := eu.metrics()
	for _, want := range []string{`azgate_pathd_forward_sources{region="ap"} 4096`, `azgate_pathd_forward_sources{region="us"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
