package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store/etcdproc"
	"github.com/azgate/azgate/internal/store/storetest"
)

// cluster starts three real etcd members (issue 8, part 7) and connects
// to all of them.
func cluster(t *testing.T) (*etcdproc.Cluster, *Store) {
	t.Helper()
	c := storetest.StartCluster(t, 3)
	s, err := Connect(Options{Endpoints: c.Endpoints(), Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for deadline := time.Now().Add(30 * time.Second); s.Ping(context.Background()) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the etcd cluster %v had no leader in 30s", c.Endpoints())
		}
	}
	return c, s
}

// TestCluster runs the store's suite on a 3-member etcd cluster.
func TestCluster(t *testing.T) {
	_, s := cluster(t)
	suite(t, s)
}

// recorder is a Sink that keeps what a follower was told.
type recorder struct {
	mu      sync.Mutex
	state   map[string]string // kind/key: value
	events  []int64           // revisions of watched Puts and Deletes, in order
	resyncs []int64           // revisions of full loads
	rev     int64             // of the last commit
	bad     []string          // watched events at or below what the follower already had
	batch   []int64
}

func newRecorder() *recorder { return &recorder{state: map[string]string{}} }

func (r *recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.batch = map[string]string{}, nil
	r.rev = -1 // loading: no events
}

func (r *recorder) Put(kind, key string, value []byte, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state[kind+"/"+key] = string(value)
	if r.rev >= 0 {
		r.batch = append(r.batch, rev)
	}
}

func (r *recorder) Delete(kind, key string, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.state, kind+"/"+key)
	if r.rev >= 0 {
		r.batch = append(r.batch, rev)
	}
}

func (r *recorder) Commit(rev int64, resync bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if resync {
		r.resyncs = append(r.resyncs, rev)
	}
	for _, e := range r.batch {
		if e <= r.rev {
			r.bad = append(r.bad, fmt.Sprintf("event of revision %d delivered after the follower reached %d", e, r.rev))
		}
	}
	r.events = append(r.events, r.batch...)
	r.batch = nil
	r.rev = rev
}

func (r *recorder) snapshot() (map[string]string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]string, len(r.state))
	for k, v := range r.state {
		m[k] = v
	}
	return m, r.rev
}

// TestClusterMemberKilled kills one member with SIGKILL (a follower, and
// separately the leader) while a follower watches and changes are
// committed, then restarts it: the follower sees every committed change,
// none twice, and ends equal to the store.
func TestClusterMemberKilled(t *testing.T) {
	for _, victim := range []string{"follower", "leader"} {
		t.Run(victim, func(t *testing.T) {
			c, s := cluster(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rec := newRecorder()
			done := make(chan error, 1)
			go func() { done <- s.FollowSink(ctx, rec) }()

			leader, err := s.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kill := c.Index(leader)
			if victim == "follower" {
				kill = (kill + 1) % len(c.Members)
			}

			// Rebinds of 20 EIPs in turn, each its own commit.
			var committed []int64
			const n = 300
			for i := 0; i < n; i++ {
				switch i {
				case n / 3:
					if err := c.Kill(kill); err != nil {
						t.Fatal(err)
					}
					t.Logf("killed %s %s (pid %d) after %d commits", victim, c.Members[kill].Name, c.Members[kill].PID, i)
				case 2 * n / 3:
					if err := c.Restart(kill); err != nil {
						t.Fatal(err)
					}
					t.Logf("restarted %s after %d commits", c.Members[kill].Name, i)
				}
				e := &model.EIP{Address: netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i%20)}), Description: fmt.Sprint(i),
					Binding: &model.Binding{Host: "h1", Guest: fmt.Sprint("g", i%3)}}
				b, _ := json.Marshal(e)
				rev, err := commitRetrying(ctx, s, []Op{{Kind: model.KindEIP, Key: e.Key(), Value: b}})
				if err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
				committed = append(committed, rev)
			}

			want, wantRev, err := s.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for {
				_, rev := rec.snapshot()
				if rev >= wantRev {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the follower is at revision %d, the store at %d", rev, wantRev)
				}
				time.Sleep(20 * time.Millisecond)
			}
			got, _ := rec.snapshot()
			if len(got) != len(want.EIPs) {
				t.Fatalf("follower holds %d objects, the store %d EIPs", len(got), len(want.EIPs))
			}
			for k, e := range want.EIPs {
				b, _ := json.Marshal(e)
				var w, g model.EIP
				json.Unmarshal(b, &w)
				if err := json.Unmarshal([]byte(got[model.KindEIP+"/"+k]), &g); err != nil || g.Description != w.Description {
					t.Errorf("EIP %s: follower has %q, the store %q", k, got[model.KindEIP+"/"+k], b)
				}
			}

			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.bad) > 0 {
				t.Errorf("re-delivered: %v", rec.bad)
			}
			seen := map[int64]int{}
			for _, e := range rec.events {
				seen[e]++
			}
			for _, r := range committed {
				covered := seen[r] == 1
				for _, l := range rec.resyncs {
					covered = covered || (seen[r] == 0 && r <= l)
				}
				if !covered {
					t.Errorf("commit at revision %d delivered %d times and not covered by a full load (loads at %v)", r, seen[r], rec.resyncs)
				}
			}
			t.Logf("%d commits, %d watched events, full loads at %v", len(committed), len(rec.events), rec.resyncs)
			cancel()
			<-done
		})
	}
}

// commitRetrying commits ops at the current commit revision, retrying
// while the cluster elects a leader. A commit whose answer was lost but
// which was applied shows as a conflict on the retry: the store then
// holds the value already, and the revision returned is the current one.
func commitRetrying(ctx context.Context, s *Store, ops []Op) (int64, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		rev, err := s.CommitRevision(cctx)
		if err == nil {
			rev, err = s.Commit(cctx, rev, ops)
		}
		cancel()
		if err == nil {
			return rev, nil
		}
		if time.Now().After(deadline) {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterLeasesSurviveLeaderKill publishes a node status with a lease
// and kills the leader: the status stays readable and the lease alive,
// and it vanishes when the publisher stops.
func TestClusterLeasesSurviveLeaderKill(t *testing.T) {
	c, s := cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	pubDone := make(chan struct{})
	go func() {
		PublishStatus(ctx, s, "edge", "e1", 200*time.Millisecond, func() model.NodeStatus {
			return model.NodeStatus{Role: "edge", Name: "e1", Updated: time.Now().UTC()}
		}, quiet)
		close(pubDone)
	}()
	// A lease of our own, kept alive through the kill.
	id, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lost, err := s.KeepAlive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteLeased(ctx, id, []KV{{Key: StatusRoot + "test/lease", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(want int) []NodeEntry {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			es, err := NodeStatuses(context.Background(), s, "edge")
			if err == nil && len(es) == want {
				return es
			}
			if time.Now().After(deadline) {
				t.Fatalf("statuses %v, %v; want %d", es, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitStatus(1)

	leader, err := s.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(c.Index(leader)); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Longer than the leases: the keep-alives and the status writes
	// must go on, and the status never vanish.
	var last time.Time
	for time.Since(killed) < 7*time.Second {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		es, err := NodeStatuses(rctx, s, "edge")
		rcancel()
		if err == nil && len(es) == 0 {
			t.Fatalf("the status vanished %v after the leader was killed", time.Since(killed))
		}
		if err == nil {
			last = es[0].Status.Updated
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-lost:
		t.Fatal("keep-alive stopped after the leader was killed")
	default:
	}
	kvs, _, err := s.GetPrefix(ctx, StatusRoot+"test/")
	if err != nil || len(kvs) != 1 {
		t.Fatalf("leased key after the leader kill: %v, %v", kvs, err)
	}
	if age := time.Since(last); age > 2*time.Second {
		t.Fatalf("status last written %v ago, 7 s after the leader kill", age)
	}
	if err := c.Restart(c.Index(leader)); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-pubDone
	waitStatus(0) // revoked on stop
}

// TestClusterUnreachableByOtherUsers starts a cluster in a directory made
// 0755 beforehand (in a world-searchable parent) and, as user nobody,
// asks every socket the members listen on for /version and /members: none
// may answer. No member may listen on TCP or on an abstract socket.
func TestClusterUnreachableByOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot run a probe as user nobody")
	}
	for _, bin := range []string{"setpriv", "curl", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("no %s: cannot run the test (scripts/setup.sh installs util-linux, curl and etcd-server)", bin)
		}
	}
	parent, err := os.MkdirTemp("", "azec-perm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	dir := filepath.Join(parent, "c")
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := etcdproc.Start(etcdproc.Config{Dir: dir, Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cluster dir %s: %v, %v; want mode 0700", dir, fi.Mode(), err)
	}
	tcp := tcpListenInodes(t)
	var socks []string
	for _, m := range c.Members {
		inodes := map[uint64]bool{}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m.PID))
		for _, e := range fds {
			l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", m.PID, e.Name()))
			if s, ok := strings.CutPrefix(l, "socket:["); ok {
				if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
					inodes[n] = true
					if tcp[n] {
						t.Errorf("etcd member %s listens on TCP (socket inode %d)", m.Name, n)
					}
				}
			}
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", m.PID))
		for _, s := range storetest.ListeningUnix(t, inodes) {
			switch {
			case strings.HasPrefix(s, "@"):
				t.Errorf("etcd member %s listens on the abstract unix socket %q: reachable by every local user", m.Name, s)
			case !filepath.IsAbs(s):
				s = filepath.Join(cwd, s) // bound relative to its working directory
			}
			if !strings.HasPrefix(s, dir+"/") {
				t.Errorf("etcd member %s listens on %q, outside the 0700 cluster dir %s", m.Name, s, dir)
			}
			socks = append(socks, s)
		}
	}
	if len(socks) != 2*len(c.Members) {
		t.Fatalf("found %d listening sockets of %d members: %q", len(socks), len(c.Members), socks)
	}
	probe := func(sock, path string, asNobody bool) (string, error) {
		var args []string
		if asNobody {
			args = []string{"setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"}
		}
		args = append(args, "curl", "-sS", "--fail", "--max-time", "3", "--unix-socket", sock, "http://etcd"+path)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		return string(out), err
	}
	client := strings.TrimPrefix(c.Members[0].ClientURL, "unix://")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := probe(client, "/version", false)
		if err == nil && strings.Contains(out, "etcdserver") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("root cannot read /version on %s (the probe is broken): %v: %s", client, err, out)
		}
	}
	for _, s := range socks {
		for _, p := range []string{"/version", "/members"} {
			if out, err := probe(s, p, true); err == nil {
				t.Errorf("user nobody got an answer from %q on %s: %.200s", s, p, out)
			}
		}
	}
}

// tcpListenInodes returns the inodes of every listening TCP socket.
func tcpListenInodes(t *testing.T) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // TCP_LISTEN
				continue
			}
			if n, err := strconv.ParseUint(fs[9], 10, 64); err == nil {
				out[n] = true
			}
		}
	}
	return out
}

// TestClusterProxies puts two etcd gRPC proxies (issue 19, part 2) in
// front of a 3-member cluster: a follower on each proxy loads, then sees
// a change committed through a member; the proxies' ports are in
// namespaces of their own (nothing on this namespace's loopback); and
// stopping them ends their processes and their sockets while the
// members go on serving.
func TestClusterProxies(t *testing.T) {
	c, s := cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.StartProxies(2); err != nil {
		t.Fatal(err)
	}
	if got := c.ProxyEndpoints(); len(got) != 2 {
		t.Fatalf("proxy endpoints %v, want 2", got)
	}
	if conn, err := net.DialTimeout("tcp", etcdproc.ProxyAddr, time.Second); err == nil {
		conn.Close()
		t.Errorf("something answers on %s in the test's namespace: a proxy's port must be in its own", etcdproc.ProxyAddr)
	}
	put := func(i int) int64 {
		t.Helper()
		e := &model.EIP{Address: netip.MustParseAddr("198.51.100.1"), Description: fmt.Sprint(i), Binding: &model.Binding{Host: "h1", Guest: "g1"}}
		b, _ := json.Marshal(e)
		rev, err := commitRetrying(ctx, s, []Op{{Kind: model.KindEIP, Key: e.Key(), Value: b}})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	first := put(0)
	var recs []*recorder
	var dones []chan error
	for i, ep := range c.ProxyEndpoints() {
		ps, err := Connect(Options{Endpoints: []string{ep}, Log: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer ps.Close()
		rec := newRecorder()
		done := make(chan error, 1)
		go func() { done <- ps.FollowSink(ctx, rec) }()
		recs, dones = append(recs, rec), append(dones, done)
		waitRev(t, rec, first, fmt.Sprintf("follower on proxy %s", c.Proxies[i].Name))
	}
	rev := put(1)
	for i, rec := range recs {
		waitRev(t, rec, rev, fmt.Sprintf("follower on proxy %s", c.Proxies[i].Name))
		got, _ := rec.snapshot()
		var e model.EIP
		if err := json.Unmarshal([]byte(got[model.KindEIP+"/198.51.100.1"]), &e); err != nil || e.Description != "1" {
			t.Errorf("proxy %s: the follower holds %q", c.Proxies[i].Name, got[model.KindEIP+"/198.51.100.1"])
		}
		rec.mu.Lock()
		if len(rec.events) == 0 || rec.events[len(rec.events)-1] != rev {
			t.Errorf("proxy %s: watched events %v, want the last at %d (a watch event, not a reload)", c.Proxies[i].Name, rec.events, rev)
		}
		rec.mu.Unlock()
	}
	cancel()
	for _, d := range dones {
		<-d
	}
	// etcd's own count of the gRPC bytes a member sent (the bench's
	// figure), read from its client socket.
	var sent float64
	for i := range c.Members {
		v, err := c.Metric(i, "etcd_network_client_grpc_sent_bytes_total")
		if err != nil {
			t.Fatal(err)
		}
		sent += v
	}
	if sent <= 0 {
		t.Errorf("the members sent %v bytes of gRPC", sent)
	}

	proxies := append([]*etcdproc.Proxy(nil), c.Proxies...)
	c.StopProxies()
	for _, p := range proxies {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.PID)); err == nil {
			t.Errorf("proxy %s (pid %d) still there after StopProxies", p.Name, p.PID)
		}
		sock := strings.TrimPrefix(p.ClientURL, "unix://")
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("proxy %s's socket %s left behind", p.Name, sock)
		}
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("the members after the proxies stopped: %v", err)
	}
}

func waitRev(t *testing.T, rec *recorder, rev int64, what string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, got := rec.snapshot(); got >= rev {
			return
		}
		if time.Now().After(deadline) {
			_, got := rec.snapshot()
			t.Fatalf("%s is at revision %d after 15s, want %d", what, got, rev)
		}
	}
}
