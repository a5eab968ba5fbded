package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// TestMain runs the fleet's agent and edge children when the bench
// executes this test binary as `fleet-agent ...` or `fleet-edge ...`
// (as it would azgate-fleetnode: defaultFleetBinary is this executable
// here).
func TestMain(m *testing.M) {
	for _, c := range fleetnode.Children {
		if len(os.Args) > 1 && os.Args[1] == c.Arg {
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			err := fleetnode.Main(ctx, os.Args[1:], os.Stdin, os.Stdout)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	defaultFleetBinary = os.Executable
	os.Exit(m.Run())
}

func TestFleetBusiestHosts(t *testing.T) {
	per := map[string]int{"h2": 5, "h3": 9, "h0": 1}
	got := fleetBusiestHosts(per, 5, 3)
	if fmt.Sprint(got) != "[h3 h2 h0]" {
		t.Errorf("%v", got)
	}
	if got := fleetBusiestHosts(per, 2, 5); fmt.Sprint(got) != "[h0 h1]" {
		t.Errorf("%v", got)
	}
}

// TestFleetEdgeChild drives the edge child (the one the bench runs as a
// process) over its pipes against a 1-member etcd: it loads its set's
// share and says how many routes it holds; an await of a rebind's
// revision answers once its route leads to the new host, an await of a
// service change once its table has the backends asked, with the
// table's checksum, which the in-process edge of the same set agrees
// with; usage reports its memory, drop the heap its fake maps held, and
// an unknown command ends it with an error.
func TestFleetEdgeChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, admin := oneMember(t, ctx)
	const eips = 300
	o := FleetOptions{Sets: 2, EdgesPerSet: 2, EIPs: eips}
	var region fleetRegion
	if _, err := region.writeAll(ctx, admin, fleetObjects(o, eips, true)); err != nil {
		t.Fatal(err)
	}
	inSet := fleetInSet(eips, 1, o.Sets)

	cmdR, cmdW := io.Pipe()
	evR, evW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		ended <- fleetnode.EdgeMain(ctx, []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--name", "s1-e1"}, cmdR, evW)
		evW.Close()
	}()
	events := bufio.NewScanner(evR)
	next := func(want string) fleetnode.Event {
		t.Helper()
		for events.Scan() {
			ev, err := fleetnode.ParseEvent(events.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if ev.Name != "s1-e1" {
				t.Fatalf("event of %q", ev.Name)
			}
			if ev.Event == want {
				return ev
			}
			if ev.Event != "applied" {
				t.Fatalf("%+v, want a %s event", ev, want)
			}
		}
		t.Fatalf("events ended (%v) before a %s event: %v", events.Err(), want, <-ended)
		return fleetnode.Event{}
	}
	send := func(cmd string) {
		t.Helper()
		if _, err := io.WriteString(cmdW, cmd+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if ev := next("loaded"); ev.EIPs != inSet || ev.Rev < region.rev || ev.LoadS <= 0 {
		t.Fatalf("loaded %+v, want %d routes at revision %d or later", ev, inSet, region.rev)
	}

	// EIP 1 is in set1 (its /16 is 1 mod 2): rebound to a spare guest of h1.
	e, err := fleetRebind(region.st, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := region.write(ctx, admin, e)
	if err != nil {
		t.Fatal(err)
	}
	send(fmt.Sprintf("await %d %v", rev, fleetnode.Cond{Kind: "route", Addr: e.Address, Host: fleetUnderlay(1)}))
	if ev := next("done"); ev.Rev != rev || ev.At <= 0 || ev.Seen <= 0 || ev.Seen > ev.At && !ev.Early {
		t.Errorf("rebind: done %+v", ev)
	}

	// The service of set1 loses a backend: the child's table and that of
	// an edge of set1 in this process agree.
	fe := newFleetEdge("s1-e0", 1)
	st, err := store.Connect(store.Options{Endpoints: cl.Endpoints(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	go edge.FollowShare(fctx, st, fe.name, fe.r, slog.New(slog.DiscardHandler))
	rev, err = region.write(ctx, admin, fleetService(1, 8, 3))
	if err != nil {
		t.Fatal(err)
	}
	key := model.TableKey(fleetServiceName(1), "web")
	send(fmt.Sprintf("await %d table %s 7", rev, key))
	done := next("done")
	aw, err := awaitEdges(ctx, []*fleetEdge{fe}, rev, time.Now(), func(*fleetEdge) fleetnode.Cond { return fleetnode.Cond{Kind: "table", Key: key, N: 7} })
	if err != nil {
		t.Fatal(err)
	}
	if done.Sum == "" || done.Sum != aw.sums[0] {
		t.Errorf("table checksums: child %q, in-process edge %q", done.Sum, aw.sums[0])
	}
	send(fmt.Sprintf("await %d routes %d", rev, inSet))
	if ev := next("done"); ev.Rev != rev {
		t.Errorf("routes: done %+v", ev)
	}

	send("usage")
	if ev := next("usage"); ev.RSSMB <= 0 || ev.AnonMB <= 0 || ev.AnonMB > ev.RSSMB || ev.PeakMB < ev.RSSMB {
		t.Errorf("usage %+v", ev)
	}
	send("drop")
	if ev := next("dropped"); ev.FakeMapsMB < 0 {
		t.Errorf("dropped %+v", ev)
	}
	send("what")
	if err := <-ended; err == nil || !strings.Contains(err.Error(), `unknown command "what"`) {
		t.Errorf("an unknown command: %v", err)
	}
}

// needEtcd skips t without an etcd binary (fails it as root: the lab
// machine has one).
func needEtcd(t *testing.T) {
	t.Helper()
	if _, err := etcdproc.Binary(); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skip("no etcd binary and not root")
	}
}

// oneMember starts a 1-member etcd cluster (stopped at the test's end)
// and returns it and a store on it once it has a leader.
func oneMember(t *testing.T, ctx context.Context) (*etcdproc.Cluster, *store.Store) {
	t.Helper()
	needEtcd(t)
	cl, err := etcdproc.Start(etcdproc.Config{Dir: t.TempDir(), Members: 1, MaxTxnOps: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop() })
	admin, err := store.Connect(store.Options{Endpoints: cl.Endpoints(), TxnOps: 1024, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for deadline := time.Now().Add(30 * time.Second); admin.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	return cl, admin
}

// fleetObjects is the fleet region of o's sets (each set's service when
// services) with EIPs 0..eips-1 on their hosts.
func fleetObjects(o FleetOptions, eips int, services bool) []model.Object {
	objs := []model.Object{&model.AZ{Name: "az1"}}
	for h := range fleetHosts(eips) {
		objs = append(objs, fleetHost(h))
	}
	for _, s := range o.sets() {
		objs = append(objs, s)
	}
	if services {
		for s := range o.Sets {
			objs = append(objs, fleetService(s, 8, -1))
		}
	}
	for i := range eips {
		objs = append(objs, fleetEIP(i, i/fleetGuestsPerHost))
	}
	return objs
}

// TestFleetBinary: the bench refuses a missing or non-executable child
// binary, naming it and how to build it, and runs an executable one by
// its absolute path.
func TestFleetBinary(t *testing.T) {
	dir := t.TempDir()
	plain := dir + "/plain"
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{dir + "/azgate-fleetnode", plain} {
		if _, err := fleetBinary(bin); err == nil || !strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "--fleetnode PATH") {
			t.Errorf("%s: %v", bin, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fleetBinary(""); err != nil || got != exe {
		t.Errorf("default (this test binary): %q, %v, want %q", got, err, exe)
	}
}
