// Package fleetnode is the fleet bench's child processes (issue 19,
// part 4: nodes as real processes), run by azgate-fleetnode (azgate-node
// built with the fleetnode tag too: cmd/azgate/fleetnode.go):
// `azgate-fleetnode fleet-agent` runs one agent
// Reconciler on the data-plane fakes for one host, following its host's
// share with the agent role's own follow (agent.Follow);
// `azgate-fleetnode fleet-edge` runs one edge Reconciler on the fakes
// (dataplane.FakeLB), following its set's share with the edge role's own
// follow (edge.FollowShare). Both read commands on stdin, one a line,
// and exit at its end (so a child never outlives the bench's pipe), and
// write events on stdout, a JSON object a line (Event):
//
//	{"event":"loaded","name":"h0","rev":812,"at":1765...,"load_s":0.41,"eips":1000}
//	{"event":"applied","name":"h0","rev":815,"at":1765...}
//	{"event":"usage","name":"h0","rss_mb":54.2,"peak_mb":54.5,"rss_gc_mb":47.0,"anon_mb":23.1,"file_mb":31.1}
//	{"event":"done","name":"s0-e1","rev":815,"at":1765...,"seen":1765...,"sum":"9f..."}
//	{"event":"dropped","name":"s0-e0","fake_maps_mb":21.5}
//
// "at" is the wall clock (unix ns) when the revision was applied: the
// bench and its children share this machine's clock. "eips" is what the
// node then holds: an agent's programmed EIPs, an edge's routes.
// Commands:
//
//	usage                            a usage event
//	await REV route ADDR HOST        (edges) a done event once REV is applied
//	await REV table KEY BACKENDS     and the route of ADDR leads to HOST, the
//	await REV routes N               table KEY has BACKENDS, the edge holds N
//	                                 routes (Cond)
//	drop                             (edges) stop following, drop the fake
//	                                 maps, a dropped event: the Go heap freed
//
// A done event's "at" is when REV was applied if the state then showed
// the condition, else ("early": true) when the child first saw it;
// "seen" is when the watch handed REV to the edge's sink, before its
// decode and apply (Tap).
//
// The package links what the node roles link (internal/edge,
// internal/agent, the store's client, internal/dataplane's fakes) and
// none of the lab, the controller, the etcd server or the rest of
// internal/bench, so that a child's memory is that of a process of the
// node binary (azgate-node) plus the fakes' (cmd/azgate's
// TestFleetNodeDeps).
// The bench (internal/bench) starts the children and reads their events
// with ParseEvent; the in-process edges and agents of the bench use the
// same Tap, Seen, Links and NewEdgeReconciler.
package fleetnode

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// BinaryName is the children's executable: make build puts
// bin/azgate-fleetnode (go build -tags node,fleetnode ./cmd/azgate)
// beside bin/azgate-lab.
const BinaryName = "azgate-fleetnode"

// AgentArg is the command an agent child runs as
// (`azgate-fleetnode fleet-agent`).
const AgentArg = "fleet-agent"

// EdgeArg is the command an edge child runs as
// (`azgate-fleetnode fleet-edge`).
const EdgeArg = "fleet-edge"

// Children are the children's commands (`azgate-fleetnode ARG`) and
// what each runs: Main parses the flags after ARG.
var Children = []struct {
	Arg, Short string
	Main       func(ctx context.Context, args []string, in io.Reader, out io.Writer) error
}{
	{EdgeArg, "One edge on the fakes following its set's share; JSON events on stdout, commands on stdin (bench fleet's child)", EdgeMain},
	{AgentArg, "One agent on the fakes following its host's share; JSON events on stdout, commands on stdin (bench fleet's child)", AgentMain},
}

// Main runs the child args[0] names with the flags after it (args:
// os.Args[1:]).
func Main(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var names []string
	for _, c := range Children {
		if len(args) > 0 && args[0] == c.Arg {
			return c.Main(ctx, args[1:], in, out)
		}
		names = append(names, c.Arg)
	}
	if len(args) == 0 {
		return fmt.Errorf("want a command: %s (the fleet bench's children: azgate-lab bench fleet runs them)", strings.Join(names, " or "))
	}
	return fmt.Errorf("unknown command %q: want %s (the fleet bench's children: azgate-lab bench fleet runs them)", args[0], strings.Join(names, " or "))
}

// NewEdgeReconciler is the edge Reconciler of a bench edge named name on
// fake (the edge role's defaults: its hash seed, no logs).
func NewEdgeReconciler(name string, fake *dataplane.FakeLB) *edge.Reconciler {
	return edge.NewReconciler(edge.Config{Name: name, Log: slog.New(slog.DiscardHandler), HashSeed: flowhash.DefaultHashSeed}, fake)
}

// Seen is the last revision an edge's watch delivered and when.
type Seen struct {
	rev, at atomic.Int64 // at: unix ns
}

// Note records that rev was delivered now.
func (s *Seen) Note(rev int64) {
	if rev > s.rev.Load() {
		s.at.Store(time.Now().UnixNano())
		s.rev.Store(rev)
	}
}

// At is when the watch delivered rev or a later revision (unix ns; 0:
// not yet).
func (s *Seen) At(rev int64) int64 {
	if s.rev.Load() >= rev {
		return s.at.Load()
	}
	return 0
}

// Tap is an edge's store.Sink: it notes when each revision's first call
// arrives (a change's Put or Delete, or the Commit of a revision that
// brought none), before the Reconciler decodes, indexes and applies it,
// so the drift splits into delivery (etcd and the client) and the edge's
// own work. (Until 2026-12-07 it noted the Commit only, after the Puts'
// decode and index: the edge's work was partly counted as delivery.)
type Tap struct {
	*edge.Reconciler
	Seen *Seen
}

func (d Tap) Put(kind, key string, value []byte, rev int64) {
	d.Seen.Note(rev)
	d.Reconciler.Put(kind, key, value, rev)
}

func (d Tap) Delete(kind, key string, rev int64) {
	d.Seen.Note(rev)
	d.Reconciler.Delete(kind, key, rev)
}

func (d Tap) Commit(rev int64, resync bool) {
	d.Seen.Note(rev)
	d.Reconciler.Commit(rev, resync)
}

// HeapInUse is the Go heap in use after a GC.
func HeapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// StartCPUProfile writes a Go CPU profile to path until stop is called
// (stop may be called more than once).
func StartCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

// Links are an agent's guest interfaces on no kernel: guest address a
// is interface "v<low 16 bits>".
type Links struct{}

func (Links) GuestInterface(a netip.Addr) (string, int, error) {
	b := a.As4()
	n := int(b[2])<<8 | int(b[3])
	return fmt.Sprintf("v%d", n), 100 + n, nil
}
func (Links) AttachGuest(string) error          { return nil }
func (Links) DetachGuest(string) error          { return nil }
func (Links) KeepResolved(string, []netip.Addr) {}

// Event is a line a child writes.
type Event struct {
	Event string `json:"event"` // loaded, applied, usage, done, dropped
	Name  string `json:"name"`
	Rev   int64  `json:"rev,omitempty"`
	At    int64  `json:"at,omitempty"` // unix ns
	// loaded: from the follow's start (its load jitter included) to the
	// first applied revision, and the EIPs programmed then.
	LoadS float64 `json:"load_s,omitempty"`
	EIPs  int     `json:"eips,omitempty"`
	// LoadCPUS: the process's CPU (user + system) from its start to
	// the loaded event.
	LoadCPUS float64 `json:"load_cpu_s,omitempty"`
	// usage: VmRSS as it is, VmHWM, and VmRSS after a forced GC and
	// debug.FreeOSMemory.
	RSSMB   float64 `json:"rss_mb,omitempty"`
	PeakMB  float64 `json:"peak_mb,omitempty"`
	RSSGCMB float64 `json:"rss_gc_mb,omitempty"`
	// RssAnon then: VmRSS less the file pages (the executable's text and
	// data, shared by every process of the binary).
	AnonMB float64 `json:"anon_mb,omitempty"`
	// RssFile then: the executable's pages mapped (shared page cache,
	// reclaimable).
	FileMB float64 `json:"file_mb,omitempty"`
	// done: when the watch delivered Rev (unix ns; 0: not seen), whether
	// the state lagged the applied revision, and a table's checksum.
	Seen  int64  `json:"seen,omitempty"`
	Early bool   `json:"early,omitempty"`
	Sum   string `json:"sum,omitempty"`
	// dropped: the Go heap freed by dropping the fake maps.
	FakeMapsMB float64 `json:"fake_maps_mb,omitempty"`
}

// rssAnonMB reads RssAnon from /proc/self/status.
func rssAnonMB() (float64, error) { return procStatusMB("RssAnon:") }

// procStatusMB reads a kB field of /proc/self/status ("RssFile:") in MB.
func procStatusMB(field string) (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/self/status: no %s", strings.TrimSuffix(field, ":"))
}

// ParseEvent reads one line of a child's stdout.
func ParseEvent(line []byte) (Event, error) {
	var ev Event
	d := json.NewDecoder(strings.NewReader(string(line)))
	d.DisallowUnknownFields()
	if err := d.Decode(&ev); err != nil {
		return ev, fmt.Errorf("child event %q: %w", line, err)
	}
	if d.More() {
		return ev, fmt.Errorf("child event %q: more than one object", line)
	}
	switch ev.Event {
	case "loaded", "applied", "done":
		if ev.Rev <= 0 || ev.At <= 0 {
			return ev, fmt.Errorf("child event %q: no revision or time", line)
		}
	case "usage":
		if ev.RSSMB <= 0 || ev.PeakMB <= 0 {
			return ev, fmt.Errorf("child event %q: no RSS", line)
		}
	case "dropped":
	default:
		return ev, fmt.Errorf("child event %q: unknown event %q", line, ev.Event)
	}
	return ev, nil
}

// Cond is what an await waits for on an edge (besides its revision).
type Cond struct {
	Kind string     // route, table, routes
	Addr netip.Addr // route: the EIP
	Host netip.Addr // route: the underlay its route leads to
	Key  string     // table: model.TableKey
	N    int        // table: backends; routes: routes held
}

func (c Cond) String() string {
	switch c.Kind {
	case "route":
		return fmt.Sprintf("route %v %v", c.Addr, c.Host)
	case "table":
		return fmt.Sprintf("table %s %d", c.Key, c.N)
	}
	return fmt.Sprintf("routes %d", c.N)
}

// ParseCond reads the fields after "await REV".
func ParseCond(f []string) (Cond, error) {
	bad := fmt.Errorf("want route ADDR HOST, table KEY BACKENDS or routes N, got %q", strings.Join(f, " "))
	if len(f) < 2 {
		return Cond{}, bad
	}
	c := Cond{Kind: f[0]}
	var err error
	switch {
	case c.Kind == "route" && len(f) == 3:
		if c.Addr, err = netip.ParseAddr(f[1]); err == nil {
			c.Host, err = netip.ParseAddr(f[2])
		}
	case c.Kind == "table" && len(f) == 3:
		c.Key = f[1]
		c.N, err = strconv.Atoi(f[2])
	case c.Kind == "routes" && len(f) == 2:
		c.N, err = strconv.Atoi(f[1])
	default:
		return Cond{}, bad
	}
	if err != nil {
		return Cond{}, fmt.Errorf("%w: %w", bad, err)
	}
	return c, nil
}

// Holds says whether an edge's state shows c (and a table's checksum).
func (c Cond) Holds(r *edge.Reconciler, fake *dataplane.FakeLB) (bool, string) {
	switch c.Kind {
	case "route":
		rt, ok, _ := fake.Route(c.Addr)
		return ok && rt.Host == c.Host, ""
	case "table":
		tb := r.Status(time.Time{}, nil).Tables[c.Key]
		return tb.Backends == c.N, tb.Checksum
	}
	return fake.RouteCount() == c.N, ""
}

// child is what a child runs: a node's follow and its state.
type child struct {
	name   string
	follow func(ctx context.Context) // until ctx ends
	held   func() int                // EIPs programmed, routes held
	// Edges only (nil for agents): the state of an await, when the watch
	// delivered a revision, and dropping the fake maps (after the follow
	// stopped; the heap freed, MB).
	holds  func(Cond) (bool, string)
	seen   func(rev int64) int64
	drop   func() float64
	loaded func() error // after the first applied revision (nil: none)

	rev, at atomic.Int64 // the last applied revision and when (unix ns)
	poke    chan struct{}
}

// applied is the Reconciler's OnApplied (under its lock: it only notes
// the revision; run writes it out).
func (c *child) applied(v int64) {
	if v > c.rev.Load() {
		c.at.Store(time.Now().UnixNano())
		c.rev.Store(v)
	}
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func newChild(name string) *child {
	return &child{name: name, poke: make(chan struct{}, 1)}
}

// await is an await command not yet answered.
type await struct {
	rev     int64
	cond    Cond
	checked bool // checked once the revision was applied (and not done)
}

// run follows and serves the commands on in until in ends or ctx does.
func (c *child) run(ctx context.Context, in io.Reader, out io.Writer) error {
	emit := func(ev Event) error {
		ev.Name = c.name
		b, _ := json.Marshal(ev)
		_, err := out.Write(append(b, '\n'))
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan struct{})
	started := time.Now()
	go func() {
		defer close(followed)
		c.follow(fctx)
	}()
	stopFollow := func() {
		cancel()
		select {
		case <-followed:
		case <-time.After(10 * time.Second):
		}
	}
	defer stopFollow()
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case cmds <- strings.TrimSpace(sc.Text()):
			case <-ctx.Done():
				return
			}
		}
	}()
	var pending []*await
	// check answers the awaits whose revision is applied and whose state
	// shows their condition.
	check := func() error {
		var err error
		pending = slices.DeleteFunc(pending, func(a *await) bool {
			if err != nil || c.rev.Load() < a.rev {
				return false
			}
			at := c.at.Load()
			ok, sum := c.holds(a.cond)
			if !ok {
				a.checked = true
				return false
			}
			if a.checked {
				at = time.Now().UnixNano()
			}
			err = emit(Event{Event: "done", Rev: a.rev, At: at, Seen: c.seen(a.rev), Early: a.checked, Sum: sum})
			return true
		})
		return err
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var sent int64
	for {
		var ticks <-chan time.Time
		if len(pending) > 0 {
			ticks = tick.C // an early await is polled
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticks:
			if err := check(); err != nil {
				return err
			}
		case line, ok := <-cmds:
			if !ok {
				return nil // the bench closed our stdin (or died)
			}
			f := strings.Fields(line)
			switch {
			case line == "usage":
				ev, err := usage()
				if err != nil {
					return err
				}
				if err := emit(ev); err != nil {
					return err
				}
			case len(f) >= 2 && f[0] == "await" && c.holds != nil:
				rev, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil || rev <= 0 {
					return fmt.Errorf("await: revision %q", f[1])
				}
				cond, err := ParseCond(f[2:])
				if err != nil {
					return fmt.Errorf("await: %w", err)
				}
				pending = append(pending, &await{rev: rev, cond: cond})
				if err := check(); err != nil {
					return err
				}
			case line == "drop" && c.drop != nil:
				stopFollow()
				if err := emit(Event{Event: "dropped", FakeMapsMB: c.drop()}); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unknown command %q", line)
			}
		case <-c.poke:
			v, t := c.rev.Load(), c.at.Load()
			if v > sent {
				ev := Event{Event: "applied", Rev: v, At: t}
				if sent == 0 {
					ev.Event, ev.LoadS, ev.EIPs = "loaded", float64(t-started.UnixNano())/1e9, c.held()
					if u, err := etcdproc.ProcUsage(os.Getpid()); err == nil {
						ev.LoadCPUS = u.CPU.Seconds()
					}
					if c.loaded != nil {
						if err := c.loaded(); err != nil {
							return err
						}
					}
				}
				if err := emit(ev); err != nil {
					return err
				}
				sent = v
			}
			if err := check(); err != nil {
				return err
			}
		}
	}
}

// usage is this process's usage event: VmRSS, VmHWM and RssAnon,
// then VmRSS after a forced GC.
func usage() (Event, error) {
	u, err := etcdproc.ProcUsage(os.Getpid())
	if err != nil {
		return Event{}, err
	}
	anon, err := rssAnonMB()
	if err != nil {
		return Event{}, err
	}
	file, err := procStatusMB("RssFile:")
	if err != nil {
		return Event{}, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	g, err := etcdproc.ProcUsage(os.Getpid())
	if err != nil {
		return Event{}, err
	}
	return Event{Event: "usage", RSSMB: u.RSSMB, PeakMB: u.PeakMB, RSSGCMB: g.RSSMB, AnonMB: anon, FileMB: file}, nil
}

// childFlags parses a child's flags: --etcd-endpoints, the node's
// name flag, --load-jitter, and those extra adds.
func childFlags(cmd, nameFlag string, args []string, extra func(*flag.FlagSet)) (endpoints []string, name string, jitter time.Duration, err error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	eps := fs.String("etcd-endpoints", "", "etcd client URLs, comma-separated")
	n := fs.String(nameFlag, "", "the node this child is ("+nameFlag+")")
	j := fs.Duration("load-jitter", 0, "store.Options.LoadJitter: wait a random share of it before each full load (as --etcd-load-jitter)")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, "", 0, err
	}
	if *eps == "" || *n == "" || fs.NArg() > 0 {
		return nil, "", 0, fmt.Errorf("%s: want --etcd-endpoints and --%s, and no arguments", cmd, nameFlag)
	}
	return strings.Split(*eps, ","), *n, *j, nil
}

// AgentMain parses the agent child's flags (args after the
// command's name) and runs it.
func AgentMain(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	endpoints, host, jitter, err := childFlags(AgentArg, "host", args, nil)
	if err != nil {
		return err
	}
	return Agent(ctx, endpoints, host, jitter, in, out)
}

// Agent is the agent child: see AgentArg. It returns
// when in ends or ctx does.
func Agent(ctx context.Context, endpoints []string, host string, jitter time.Duration, in io.Reader, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	// FreeAfterLoad and LoadGCPercent as the agent role sets them (cmd/azgate).
	st, err := store.Connect(store.Options{Endpoints: endpoints, Log: quiet, LoadJitter: jitter, FreeAfterLoad: true, LoadGCPercent: store.AgentLoadGCPercent})
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := agent.NewReconciler(agent.Config{NoRetry: true, Name: host, Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), Links{})
	if err != nil {
		return err
	}
	c := newChild(host)
	r.OnApplied = c.applied
	c.held = func() int { return r.ProgrammedCount() }
	c.follow = func(ctx context.Context) {
		agent.Follow(ctx, quiet, st, host, r)
		r.Stop()
	}
	return c.run(ctx, in, out)
}

// EdgeMain parses the edge child's flags (args after the
// command's name) and runs it.
func EdgeMain(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var profile string
	endpoints, name, jitter, err := childFlags(EdgeArg, "name", args, func(fs *flag.FlagSet) {
		fs.StringVar(&profile, "profile", "", "write a Go CPU profile of the load to this path + .cpu and an allocation profile after it to + .heap")
	})
	if err != nil {
		return err
	}
	return Edge(ctx, endpoints, name, jitter, profile, in, out)
}

// Edge is the edge child: see EdgeArg. It returns
// when in ends or ctx does. profile: see bench.FleetOptions.EdgeProfile.
func Edge(ctx context.Context, endpoints []string, name string, jitter time.Duration, profile string, in io.Reader, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	// FreeAfterLoad and LoadGCPercent as the edge role sets them (cmd/azgate).
	st, err := store.Connect(store.Options{Endpoints: endpoints, Log: quiet, LoadJitter: jitter, FreeAfterLoad: true, LoadGCPercent: store.NodeLoadGCPercent})
	if err != nil {
		return err
	}
	defer st.Close()
	fake := dataplane.NewFakeLB()
	r := NewEdgeReconciler(name, fake)
	var seen Seen
	c := newChild(name)
	r.OnApplied = c.applied
	c.held = func() int { return fake.RouteCount() }
	c.holds = func(cond Cond) (bool, string) { return cond.Holds(r, fake) }
	c.seen = seen.At
	c.follow = func(ctx context.Context) { edge.FollowShare(ctx, st, name, Tap{r, &seen}, quiet) }
	c.drop = func() float64 {
		before := HeapInUse()
		fake.RouteMap, fake.Counters = map[netip.Addr]dataplane.Route{}, map[uint32]dataplane.Counters{}
		return float64(before-HeapInUse()) / (1 << 20)
	}
	if profile != "" {
		stop, err := StartCPUProfile(profile + ".cpu")
		if err != nil {
			return err
		}
		defer stop()
		c.loaded = func() error {
			stop()
			hf, err := os.Create(profile + ".heap")
			if err != nil {
				return err
			}
			defer hf.Close()
			return pprof.Lookup("allocs").WriteTo(hf, 0)
		}
	}
	err = c.run(ctx, in, out)
	runtime.KeepAlive(r)
	return err
}
