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

	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// TestMain runs the fleet's agent and edge children when the bench
// re-executes this test binary as `bench fleet fleet-agent ...` or
// `bench fleet fleet-edge ...` (FleetOptions.Binary defaults to the
// running executable).
func TestMain(m *testing.M) {
	for _, c := range FleetChildren {
		if len(os.Args) > 3 && os.Args[1] == "bench" && os.Args[2] == "fleet" && os.Args[3] == c.Arg {
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			err := c.Main(ctx, os.Args[4:], os.Stdin, os.Stdout)
			cancel()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

func TestParseFleetNodeEvent(t *testing.T) {
	ev, err := parseFleetNodeEvent([]byte(`{"event":"loaded","name":"h0","rev":812,"at":1765000000000000000,"load_s":0.41,"eips":1000}`))
	if err != nil || ev.Event != "loaded" || ev.Name != "h0" || ev.Rev != 812 || ev.EIPs != 1000 || ev.LoadS != 0.41 {
		t.Errorf("%+v %v", ev, err)
	}
	ev, err = parseFleetNodeEvent([]byte(`{"event":"usage","name":"h0","rss_mb":21.3,"peak_mb":30.2,"rss_gc_mb":17,"anon_mb":9.5}`))
	if err != nil || ev.RSSMB != 21.3 || ev.PeakMB != 30.2 || ev.RSSGCMB != 17 || ev.AnonMB != 9.5 {
		t.Errorf("%+v %v", ev, err)
	}
	ev, err = parseFleetNodeEvent([]byte(`{"event":"done","name":"s0-e1","rev":815,"at":1765000000000000000,"seen":1764999999999000000,"early":true,"sum":"9f"}`))
	if err != nil || ev.Seen != 1764999999999000000 || !ev.Early || ev.Sum != "9f" {
		t.Errorf("%+v %v", ev, err)
	}
	if ev, err = parseFleetNodeEvent([]byte(`{"event":"dropped","name":"s0-e0","fake_maps_mb":21.5}`)); err != nil || ev.FakeMapsMB != 21.5 {
		t.Errorf("%+v %v", ev, err)
	}
	for _, bad := range []string{
		``, `not json`, `{"event":"done","name":"s0-e1","sum":"9f"}`, `{"event":"loaded","name":"h0"}`, `{"event":"applied","rev":3}`,
		`{"event":"usage","name":"h0"}`, `{"event":"what","rev":1,"at":1}`,
		`{"event":"applied","rev":3,"at":1,"extra":1}`, `{"event":"applied","rev":3,"at":1} {}`,
	} {
		if ev, err := parseFleetNodeEvent([]byte(bad)); err == nil {
			t.Errorf("%q: parsed as %+v", bad, ev)
		}
	}
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

func TestParseFleetCond(t *testing.T) {
	for in, want := range map[string]string{
		"route 100.64.0.1 198.18.0.2": "route 100.64.0.1 198.18.0.2",
		"table web0/web 7":            "table web0/web 7",
		"routes 750":                  "routes 750",
	} {
		c, err := parseFleetCond(strings.Fields(in))
		if err != nil || c.String() != want {
			t.Errorf("%q: %v %v", in, c, err)
		}
	}
	for _, bad := range []string{"", "route 100.64.0.1", "route x 198.18.0.2", "table web0/web", "table web0/web x", "routes", "routes 1 2", "what 1"} {
		if c, err := parseFleetCond(strings.Fields(bad)); err == nil {
			t.Errorf("%q: parsed as %v", bad, c)
		}
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
	needEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := etcdproc.Start(etcdproc.Config{Dir: t.TempDir(), Members: 1, MaxTxnOps: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	admin, err := store.Connect(store.Options{Endpoints: cl.Endpoints(), TxnOps: 1024, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for deadline := time.Now().Add(30 * time.Second); admin.Ping(ctx) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	const eips = 300
	o := FleetOptions{Sets: 2, EdgesPerSet: 2, EIPs: eips}
	objs := []model.Object{&model.AZ{Name: "az1"}}
	for h := range fleetHosts(eips) {
		objs = append(objs, fleetHost(h))
	}
	for _, s := range o.sets() {
		objs = append(objs, s)
	}
	for s := range o.Sets {
		objs = append(objs, fleetService(s, 8, -1))
	}
	for i := range eips {
		objs = append(objs, fleetEIP(i, i/fleetGuestsPerHost))
	}
	var region fleetRegion
	if _, err := region.writeAll(ctx, admin, objs); err != nil {
		t.Fatal(err)
	}
	inSet := fleetInSet(eips, 1, o.Sets)

	cmdR, cmdW := io.Pipe()
	evR, evW := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		ended <- FleetEdgeChildMain(ctx, []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--name", "s1-e1"}, cmdR, evW)
		evW.Close()
	}()
	events := bufio.NewScanner(evR)
	next := func(want string) FleetNodeEvent {
		t.Helper()
		for events.Scan() {
			ev, err := parseFleetNodeEvent(events.Bytes())
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
		return FleetNodeEvent{}
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
	send(fmt.Sprintf("await %d %v", rev, fleetCond{kind: "route", addr: e.Address, host: fleetUnderlay(1)}))
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
	aw, err := awaitEdges(ctx, []*fleetEdge{fe}, rev, time.Now(), func(*fleetEdge) fleetCond { return fleetCond{kind: "table", key: key, n: 7} })
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
