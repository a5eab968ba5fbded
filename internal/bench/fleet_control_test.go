package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/store/etcdproc"
)

// TestFleetControlProxies runs the control bench at a toy size with the
// edges on 2 etcd gRPC proxies: it passes its own checks (every edge
// applied every rebind and agrees on the table), and prints the members'
// CPU and bytes per 1,000 changes/s with their units.
func TestFleetControlProxies(t *testing.T) {
	if _, err := etcdproc.Binary(); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skip("no etcd binary and not root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rs, err := FleetControl(ctx, FleetOptions{Sets: 1, EdgesPerSet: 4, EIPs: 50, Changes: 20, ServiceChanges: 2, Proxies: 2, Out: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range rs {
		got[r.Name] = r
	}
	for name, unit := range map[string]string{"etcd_members_cpu_per_1k_changes_s": "cores", "etcd_members_sent_per_change": "bytes",
		"etcd_members_sent_per_1k_changes_s": "MB/s", "etcd_proxies_cpu_per_1k_changes_s": "cores", "drift_all_edges_p99": "ms"} {
		r, ok := got[name]
		if !ok || r.Unit != unit {
			t.Errorf("%s: %+v, want one in %s", name, r, unit)
		}
	}
	if got["etcd_proxies"].Value != 2 {
		t.Errorf("etcd_proxies %v, want 2", got["etcd_proxies"].Value)
	}
	// Each rebind reaches the 2 proxies (and the writer): the members
	// sent something for each.
	if v := got["etcd_members_sent_per_change"].Value; v <= 0 {
		t.Errorf("members sent %v bytes per change", v)
	}
}
