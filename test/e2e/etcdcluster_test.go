package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
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
func upEtcdLab(t *testing.T, members int) *lab.Lab {
	t.Helper()
	cfg := lab.Config{Prefix: "aze-", StateDir: t.TempDir() + "/lab", Binary: labBinary(t), LabBinary: azgateLabBinary(t), Out: testWriter{t}, EtcdMembers: members}
	lab.Down(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids, _ := etcdproc.Saved(filepath.Join(cfg.StateDir, "etcd"))
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
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.Process.PID))
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if want := "--etcd-endpoints\x00" + strings.Join(cl.Endpoints(), ",") + "\x00"; !strings.Contains(string(b), want) {
			t.Fatalf("%s runs %q, want %q", n.Name, strings.ReplaceAll(string(b), "\x00", " "), want)
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
