package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// upEtcdLab is upLab with the store on members real etcd-server processes
// (lab up --etcd-members).
func upEtcdLab(t *testing.T, members int) *lab.Lab { t.Helper(); return upEtcdProxyLab(t, members, 0) }

// upEtcdProxyLab is upEtcdLab with proxies etcd gRPC proxies in front of
// the members (lab up --etcd-proxies); its cleanup checks that lab down
// stopped them and their bridges too.
func upEtcdProxyLab(t *testing.T, members, proxies int) *lab.Lab {
	t.Helper()
	cfg := lab.Config{Prefix: "aze-", StateDir: t.TempDir() + "/lab", Binary: labBinary(t), LabBinary: azgateLabBinary(t), Out: testWriter{t}, EtcdMembers: members, EtcdProxies: proxies}
	lab.Down(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids, _ := etcdproc.Saved(filepath.Join(cfg.StateDir, "etcd"))
		if c, _ := etcdproc.Attach(filepath.Join(cfg.StateDir, "etcd")); c != nil {
			for _, p := range c.Proxies {
				pids["proxy "+p.Name] = p.PID
				pids["bridge of "+p.Name] = p.BridgePID
			}
		}
		if err := lab.Down(cfg); err != nil {
			t.Errorf("lab down: %v", err)
		}
		if left, _ := netns.List(cfg.Prefix); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
		if pins, _ := filepath.Glob("/sys/fs/bpf/azgate/" + cfg.Prefix + "*"); len(pins) > 0 {
			t.Errorf("pins left behind: %v", pins)
		}
		for name, pid := range pids {
			if alive(pid) {
				t.Errorf("etcd member %s (pid %d) left running", name, pid)
			}
		}
	})
	return l
}

// edgeView is what must not move in an edge while a member dies: its
// route count and its service tables' checksums.
func edgeView(t *testing.T, ctx context.Context, l *lab.Lab, after time.Time) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := l.NodeStatuses(ctx)
		var views []string
		fresh := err == nil
		for _, n := range l.Topo.NodesByRole("edge") {
			s, ok := st[n.Name]
			if !ok || !s.Updated.After(after) {
				fresh = false
				break
			}
			var tables []string
			for k, tb := range s.Tables {
				tables = append(tables, fmt.Sprintf("%s=%s/%d", k, tb.Checksum, tb.Healthy))
			}
			sort.Strings(tables)
			views = append(views, fmt.Sprintf("%s: %d routes, tables %s, errors %v", n.Name, s.Routes, strings.Join(tables, " "), s.Errors))
		}
		if fresh {
			return strings.Join(views, "; ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fresh edge status since %v in 20s (%v)", after.Format(time.StampMilli), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestEtcdMemberKilledUnderTraffic runs the lab on a 3-member etcd
// cluster (issue 8, part 7) and kills one member with SIGKILL, the leader
// and then another, while requests stream to an EIP and to a service VIP:
// no request fails, and the edges' route counts and table checksums stay
// as they were. With a member down the region still takes changes.
func TestEtcdMemberKilledUnderTraffic(t *testing.T) {
	l := upEtcdLab(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := l.Etcd()
	if err != nil || cl == nil || len(cl.Members) != 3 {
		t.Fatalf("the lab's etcd cluster: %v, %v", cl, err)
	}
	// Every role runs with all three members, not the embedded etcd.
	for _, n := range append(l.Topo.NodesByRole("edge"), l.Topo.NodesByRole("host")...) {
		set, err := lab.RunningSettings(n.Process.PID)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if want := strings.Join(cl.Endpoints(), ","); set["etcd-endpoints"] != want {
			t.Fatalf("%s runs with etcd-endpoints %q, want %q", n.Name, set["etcd-endpoints"], want)
		}
	}
	s, err := store.Connect(store.Options{Endpoints: cl.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	services(t, ctx, c)
	eipURL, vipURL := "http://"+eip+"/", "http://"+vipWeb+"/"
	if _, err := l.WaitAnswer(ctx, eipURL, "hello from az1-h1-g1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, vipURL, "", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Health checks settle before the reference view is taken.
	time.Sleep(2 * time.Second)
	before := edgeView(t, ctx, l, time.Now())
	t.Logf("edges before: %s", before)

	for _, victim := range []string{"leader", "follower"} {
		leader, err := s.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		kill := cl.Index(leader)
		if victim == "follower" {
			kill = (kill + 1) % len(cl.Members)
		}
		m := cl.Members[kill]
		sctx, scancel := context.WithTimeout(ctx, 8*time.Second)
		done := make(chan [2][]lab.Sample)
		go func() {
			var out [2][]lab.Sample
			ch := make(chan []lab.Sample)
			go func() { ch <- l.Stream(sctx, "inet", vipURL, 5*time.Millisecond, 2*time.Second) }()
			out[0] = l.Stream(sctx, "inet", eipURL, 5*time.Millisecond, 2*time.Second)
			out[1] = <-ch
			done <- out
		}()
		time.Sleep(2 * time.Second)
		killed := time.Now()
		if err := cl.Kill(kill); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed the %s, etcd member %s (pid %d)", victim, m.Name, m.PID)
		samples := <-done
		scancel()
		for i, url := range []string{eipURL, vipURL} {
			failed := 0
			for _, sm := range samples[i] {
				if sm.Err != "" {
					failed++
					if failed <= 5 {
						t.Errorf("%s: request at %v failed: %s", url, sm.Start.Sub(killed).Round(time.Millisecond), sm.Err)
					}
				}
			}
			t.Logf("%s: %d requests, %d failed, with the %s killed 2 s in", url, len(samples[i]), failed, victim)
			if len(samples[i]) < 500 {
				t.Errorf("%s: only %d requests in 8 s: the stream itself is broken", url, len(samples[i]))
			}
		}
		// Statuses written after the kill: the edges kept publishing, and
		// nothing in their data plane moved.
		after := edgeView(t, ctx, l, killed.Add(time.Second))
		if after != before {
			t.Errorf("edges changed after the %s was killed:\n before %s\n after  %s", victim, before, after)
		}

		// Two members are a quorum: the region still takes changes.
		if _, err := c.BindEIP(ctx, "198.51.100.8", "az2-h1", "g1"); err != nil {
			t.Fatalf("bind with member %s down: %v", m.Name, err)
		}
		if _, err := l.WaitAnswer(ctx, "http://198.51.100.8/", "hello from az2-h1-g1", 10*time.Second); err != nil {
			t.Fatalf("with member %s down: %v", m.Name, err)
		}
		if _, err := c.UnbindEIP(ctx, "198.51.100.8"); err != nil {
			t.Fatal(err)
		}
		if err := cl.Restart(kill); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, err := s.Client.Status(ctx, m.ClientURL); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd member %s did not answer 20s after its restart", m.Name)
			}
		}
		before = edgeView(t, ctx, l, time.Now())
	}
	// The lab's status lists the members, all running again.
	v := l.Status(ctx)
	if len(v.Etcd) != 3 {
		t.Fatalf("lab status lists %d etcd members", len(v.Etcd))
	}
	for _, m := range v.Etcd {
		if !m.Running {
			t.Errorf("etcd member %s not running after its restart", m.Name)
		}
	}
}

// alive tells whether a process exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestEtcdProxiesLab runs the lab with 3 members and 2 gRPC proxies
// (issue 19, part 2): every edge and agent runs with its one proxy,
// alternating, and still loads, reports and programs (lab up waits for
// every node's status, the BGP sessions and the router's route); the
// controller keeps every member; lab status says who points where; an
// EIP bound through the API reaches every edge through the proxies.
func TestEtcdProxiesLab(t *testing.T) {
	l := upEtcdProxyLab(t, 3, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := l.Etcd()
	if err != nil || cl == nil || len(cl.Proxies) != 2 {
		t.Fatalf("the lab's etcd cluster: %+v, %v", cl, err)
	}
	for k, n := range append(l.Topo.NodesByRole("edge"), l.Topo.NodesByRole("host")...) {
		set, err := lab.RunningSettings(n.Process.PID)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		want := cl.Proxies[k%2].ClientURL
		if set["etcd-endpoints"] != want {
			t.Errorf("%s runs with etcd-endpoints %q, want %s", n.Name, set["etcd-endpoints"], want)
		}
		if got := l.ProxyOf(n.Name); got != want {
			t.Errorf("lab says %s points at %q, want %q", n.Name, got, want)
		}
	}
	v := l.Status(ctx)
	if len(v.EtcdProxies) != 2 || !v.EtcdProxies[0].Running || !v.EtcdProxies[1].Running {
		t.Errorf("lab status proxies: %+v", v.EtcdProxies)
	}
	ctl, err := os.ReadFile(filepath.Join(l.Cfg.StateDir, "controller.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(ctl)))
	set, err := lab.RunningSettings(pid)
	if want := strings.Join(cl.Endpoints(), ","); err != nil || set["etcd-endpoints"] != want {
		t.Errorf("the controller runs with etcd-endpoints %q (%v), want the members %q", set["etcd-endpoints"], err, want)
	}
	// A change after the loads: every node's applied revision reaches
	// the revision of the write, through its proxy.
	st, err := store.Connect(store.Options{Endpoints: cl.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	doc := l.Region()
	doc.EIPs[0].Description = "through the proxies"
	if _, err := c.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	rev, err := st.CommitRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ns, err := l.NodeStatuses(ctx)
		var behind []string
		for _, n := range append(l.Topo.NodesByRole("edge"), l.Topo.NodesByRole("host")...) {
			if s, ok := ns[n.Name]; err != nil || !ok || s.AppliedRevision < rev {
				behind = append(behind, fmt.Sprintf("%s at %d", n.Name, s.AppliedRevision))
			}
		}
		if len(behind) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the change at revision %d: %v", rev, behind)
		}
	}
}
