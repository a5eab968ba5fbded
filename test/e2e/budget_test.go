package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// rssBytes is a process's resident set size (/proc/PID/status VmRSS).
func rssBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("pid %d: no VmRSS", pid)
	return 0
}

// natService is a nat service at vip of pools pools of m slots, one DMZ
// backend each.
func natService(name, vip string, pools int, m uint32) *model.Service {
	v := &model.Service{Name: name, VIP: netip.MustParseAddr(vip), Mode: model.ModeNAT, TableSize: m}
	for i := range pools {
		p := fmt.Sprintf("p%d", i)
		v.Listeners = append(v.Listeners, model.Listener{Protocol: "tcp", Port: uint16(2000 + i), Pool: p})
		v.Pools = append(v.Pools, model.Pool{Name: p, Backends: []model.Backend{{Address: lab.DMZAddr(1), Port: 80}}})
	}
	return v
}

// TestTableBudgetAttack (issue 17): the 40 KB request that took every
// edge of the lab to 2 GB (a nat service of 4 pools at 4,194,301 slots) is
// refused with its figures, as is one that keeps to the per-pool bound
// but goes over its set's budget; a large legal service (4 pools of
// 524,287 slots, in prefix-ab) is programmed by the edges of prefix-ab
// while the edges of the dedicated and quarantine sets build nothing and
// do not grow.
func TestTableBudgetAttack(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.PutService(ctx, natService("attack", "198.51.100.60", 4, model.MaxTableSize))
	if err == nil || !strings.Contains(err.Error(), "tableSize") || !strings.Contains(err.Error(), "4194301 is above 524296") {
		t.Fatalf("the attack: %v, want tableSize refused (4194301 above 524296)", err)
	}
	_, err = c.PutService(ctx, natService("attack", "198.51.100.60", 17, 524287))
	if err == nil || !strings.Contains(err.Error(), "asks 8912879 Maglev slots") || !strings.Contains(err.Error(), "its limit is 8388608") {
		t.Fatalf("17 pools of 524287: %v, want refused with the set's budget", err)
	}

	pids := map[string]int{}
	for _, n := range l.Topo.Nodes {
		if n.Role == "edge" && n.Process != nil {
			pids[n.Name] = n.Process.PID
		}
	}
	others := []string{"edge-d1", "edge-q1"}
	before := map[string]int64{}
	for _, n := range append([]string{"edge-a1"}, others...) {
		if pids[n] == 0 {
			t.Fatalf("no process for %s (%v)", n, pids)
		}
		before[n] = rssBytes(t, pids[n])
	}
	const pools, m = 4, 524287
	res, err := c.PutService(ctx, natService("large", "198.51.100.60", pools, m))
	if err != nil {
		t.Fatalf("a large legal service: %v", err)
	}
	// Every edge applies the revision; only prefix-ab's hold the tables.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := l.NodeStatuses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		done := true
		for _, n := range append([]string{"edge-a1"}, others...) {
			if st[n].AppliedRevision < res.Revision {
				done = false
			}
		}
		if done {
			if _, ok := st["edge-a1"].Tables[model.TableKey("large", "p0")]; !ok {
				t.Errorf("edge-a1 (prefix-ab) holds no table of the service: %v", st["edge-a1"].Tables)
			}
			for _, n := range others {
				if len(st[n].Tables) != 0 {
					t.Errorf("%s (another set) holds tables %v", n, st[n].Tables)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d not applied by every edge: %+v", res.Revision, st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	const slotBytes = pools * m * 4 // 8 MB of table entries
	grew := func(n string) int64 { return rssBytes(t, pids[n]) - before[n] }
	t.Logf("RSS growth: edge-a1 %.1f MB, edge-d1 %.1f MB, edge-q1 %.1f MB (tables %.1f MB)",
		float64(grew("edge-a1"))/1e6, float64(grew("edge-d1"))/1e6, float64(grew("edge-q1"))/1e6, float64(slotBytes)/1e6)
	if g := grew("edge-a1"); g < slotBytes {
		t.Errorf("edge-a1 grew by %d bytes, less than the %d bytes of its tables: the measure is wrong", g, slotBytes)
	}
	for _, n := range others {
		if g := grew(n); g > slotBytes/2 {
			t.Errorf("%s (another set) grew by %d bytes with the service (its tables are %d)", n, g, slotBytes)
		}
	}
	if _, err := c.DeleteService(ctx, "large"); err != nil {
		t.Fatal(err)
	}
}
