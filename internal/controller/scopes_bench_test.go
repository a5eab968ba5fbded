package controller

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// scopeEIPs sizes the scope benchmarks' region (migrationRegion).
var (
	scopeEIPs = flag.Int("scope-eips", 100000, "EIPs of BenchmarkScopeMigration and BenchmarkScopeWrite")
	scopeLog  = flag.Bool("scope-log", false, "the scope tests' and benchmarks' controllers log to stderr")
)

// BenchmarkScopeMigration starts a controller on a store written without
// scope copies (-scope-eips EIPs, all bound, 1,000 guests a host): the
// time of the repair that writes every copy, and the process's memory
// after it (the controller with its embedded etcd, in one process):
//
//	go test ./internal/controller/ -run '^$' -bench ScopeMigration -benchtime 1x -scope-eips 1000000
func BenchmarkScopeMigration(b *testing.B) {
	n := *scopeEIPs
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		start := time.Now()
		var dbBefore int64
		writeUnscoped(b, dir, migrationRegion(n), func(st *store.Store) { dbBefore = dbSize(b, st) })
		b.Logf("%d EIPs written without copies in %v; etcd database %.0f MiB in use", n, time.Since(start).Round(time.Millisecond), float64(dbBefore)/(1<<20))
		runtime.GC()
		b.StartTimer()
		start = time.Now()
		c, stop := openEmptyCore(b, dir)
		opened := time.Since(start)
		b.StopTimer()
		copies := metricValue(b, c, `azgate_controller_scope_copies_total{by="repair",op="put"}`)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, hwm := selfMem()
		dbAfter := dbSize(b, c.store)
		b.Logf("etcd database with the copies: %.0f MiB in use (%+.0f MiB, %.0f B per copy)", float64(dbAfter)/(1<<20),
			float64(dbAfter-dbBefore)/(1<<20), float64(dbAfter-dbBefore)/copies)
		b.ReportMetric(copies, "copies")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(hwm, "peak-rss-MiB")
		b.Logf("%d EIPs: controller started (load and migration) in %v, %.0f copies written; heap in use %.0f MiB, RSS %.0f MiB, peak %.0f MiB (embedded etcd included)",
			n, opened.Round(time.Millisecond), copies, float64(ms.HeapInuse)/(1<<20), rss, hwm)
		start = time.Now()
		if _, err := c.repairCopies(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Logf("a repair with nothing to do (every later start) took %v", time.Since(start).Round(time.Millisecond))
		stop()
		b.StartTimer()
	}
}

// dbSize is the etcd database's size in use (its bbolt pages holding
// data, not the file's free pages).
func dbSize(b *testing.B, st *store.Store) int64 {
	b.Helper()
	ep := st.Client.Endpoints()[0]
	resp, err := st.Client.Status(context.Background(), ep)
	if err != nil {
		b.Fatal(err)
	}
	return resp.DbSizeInUse
}

// selfMem is this process's VmRSS and VmHWM in MiB.
func selfMem() (rss, hwm float64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// BenchmarkScopeWrite times writes with their scope copies on a region of
// -scope-eips EIPs: a rebind (the copies of one EIP and two hosts move)
// and an edge set change (every object's scopes are computed again; the
// change, an empty prefix added or removed, moves none).
//
//	go test ./internal/controller/ -run '^$' -bench ScopeWrite -scope-eips 100000
func BenchmarkScopeWrite(b *testing.B) {
	n := *scopeEIPs
	dir := b.TempDir()
	writeUnscoped(b, dir, migrationRegion(n))
	c, _ := openEmptyCore(b, dir)
	ctx := context.Background()
	b.Run("rebind", func(b *testing.B) {
		for i := range b.N {
			// EIP 0 goes to the spare guest of m1, then of m0.
			host := fmt.Sprintf("m%d", i%2*min(1, n/1000-1))
			if _, err := c.Bind(ctx, "100.64.0.0", IfMatch{}, model.Binding{Host: host, Guest: "spare"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("edgeset", func(b *testing.B) {
		for i := range b.N {
			o, _, _, err := c.Get(model.KindEdgeSet, "prefix-b")
			if err != nil {
				b.Fatal(err)
			}
			set := *o.(*model.EdgeSet)
			set.Prefixes = set.Prefixes[:2:2]
			if i%2 == 0 {
				set.Prefixes = append(set.Prefixes, netip.MustParsePrefix("203.0.113.0/25"))
			}
			if _, err := c.Replace(ctx, "prefix-b", IfMatch{}, &set); err != nil {
				b.Fatal(err)
			}
		}
	})
}
