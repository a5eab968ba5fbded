package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/edge"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// The fleet's child processes (issue 19, part 4: nodes as real
// processes): `azgate-lab bench fleet fleet-agent` runs one agent
// Reconciler on the data-plane fakes for one host, following its host's
// share with the agent role's own follow (agent.Follow); `azgate-lab
// bench fleet fleet-edge` runs one edge Reconciler on the fakes
// (dataplane.FakeLB), following its set's share with the edge role's own
// follow (edge.FollowShare). Both read commands on stdin, one a line,
// and exit at its end (so a child never outlives the bench's pipe), and
// write events on stdout, a JSON object a line (FleetNodeEvent):
//
//	{"event":"loaded","name":"h0","rev":812,"at":1765...,"load_s":0.41,"eips":1000}
//	{"event":"applied","name":"h0","rev":815,"at":1765...}
//	{"event":"usage","name":"h0","rss_mb":54.2,"peak_mb":54.5,"rss_gc_mb":47.0,"anon_mb":23.1}
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
//	                                 routes (fleetCond)
//	drop                             (edges) stop following, drop the fake
//	                                 maps, a dropped event: the Go heap freed
//
// A done event's "at" is when REV was applied if the state then showed
// the condition, else ("early": true) when the child first saw it;
// "seen" is when the watch handed REV to the edge's sink, before its
// decode and apply (deliveryTap).

// FleetAgentChildArg is the hidden command an agent child runs as
// (`azgate-lab bench fleet fleet-agent`).
const FleetAgentChildArg = "fleet-agent"

// FleetEdgeChildArg is the hidden command an edge child runs as
// (`azgate-lab bench fleet fleet-edge`).
const FleetEdgeChildArg = "fleet-edge"

// FleetChildren are the children's hidden commands (`azgate-lab bench
// fleet ARG`) and what each runs: Main parses the flags after ARG.
var FleetChildren = []struct {
	Arg, Short string
	Main       func(ctx context.Context, args []string, in io.Reader, out io.Writer) error
}{
	{FleetEdgeChildArg, "One edge on the fakes following its set's share; JSON events on stdout, commands on stdin (bench fleet's child)", FleetEdgeChildMain},
	{FleetAgentChildArg, "One agent on the fakes following its host's share; JSON events on stdout, commands on stdin (bench fleet's child)", FleetAgentChildMain},
}

// FleetNodeEvent is a line a child writes.
type FleetNodeEvent struct {
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

// parseFleetNodeEvent reads one line of a child's stdout.
func parseFleetNodeEvent(line []byte) (FleetNodeEvent, error) {
	var ev FleetNodeEvent
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

// fleetCond is what an await waits for on an edge (besides its revision).
type fleetCond struct {
	kind string     // route, table, routes
	addr netip.Addr // route: the EIP
	host netip.Addr // route: the underlay its route leads to
	key  string     // table: model.TableKey
	n    int        // table: backends; routes: routes held
}

func (c fleetCond) String() string {
	switch c.kind {
	case "route":
		return fmt.Sprintf("route %v %v", c.addr, c.host)
	case "table":
		return fmt.Sprintf("table %s %d", c.key, c.n)
	}
	return fmt.Sprintf("routes %d", c.n)
}

// parseFleetCond reads the fields after "await REV".
func parseFleetCond(f []string) (fleetCond, error) {
	bad := fmt.Errorf("want route ADDR HOST, table KEY BACKENDS or routes N, got %q", strings.Join(f, " "))
	if len(f) < 2 {
		return fleetCond{}, bad
	}
	c := fleetCond{kind: f[0]}
	var err error
	switch {
	case c.kind == "route" && len(f) == 3:
		if c.addr, err = netip.ParseAddr(f[1]); err == nil {
			c.host, err = netip.ParseAddr(f[2])
		}
	case c.kind == "table" && len(f) == 3:
		c.key = f[1]
		c.n, err = strconv.Atoi(f[2])
	case c.kind == "routes" && len(f) == 2:
		c.n, err = strconv.Atoi(f[1])
	default:
		return fleetCond{}, bad
	}
	if err != nil {
		return fleetCond{}, fmt.Errorf("%w: %w", bad, err)
	}
	return c, nil
}

// holds says whether an edge's state shows c (and a table's checksum).
func (c fleetCond) holds(r *edge.Reconciler, fake *dataplane.FakeLB) (bool, string) {
	switch c.kind {
	case "route":
		rt, ok, _ := fake.Route(c.addr)
		return ok && rt.Host == c.host, ""
	case "table":
		tb := r.Status(time.Time{}, nil).Tables[c.key]
		return tb.Backends == c.n, tb.Checksum
	}
	return fake.RouteCount() == c.n, ""
}

// fleetChild is what a child runs: a node's follow and its state.
type fleetChild struct {
	name   string
	follow func(ctx context.Context) // until ctx ends
	held   func() int                // EIPs programmed, routes held
	// Edges only (nil for agents): the state of an await, when the watch
	// delivered a revision, and dropping the fake maps (after the follow
	// stopped; the heap freed, MB).
	holds  func(fleetCond) (bool, string)
	seen   func(rev int64) int64
	drop   func() float64
	loaded func() error // after the first applied revision (nil: none)

	rev, at atomic.Int64 // the last applied revision and when (unix ns)
	poke    chan struct{}
}

// applied is the Reconciler's OnApplied (under its lock: it only notes
// the revision; run writes it out).
func (c *fleetChild) applied(v int64) {
	if v > c.rev.Load() {
		c.at.Store(time.Now().UnixNano())
		c.rev.Store(v)
	}
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

func newFleetChild(name string) *fleetChild {
	return &fleetChild{name: name, poke: make(chan struct{}, 1)}
}

// fleetAwait is an await command not yet answered.
type fleetAwait struct {
	rev     int64
	cond    fleetCond
	checked bool // checked once the revision was applied (and not done)
}

// run follows and serves the commands on in until in ends or ctx does.
func (c *fleetChild) run(ctx context.Context, in io.Reader, out io.Writer) error {
	emit := func(ev FleetNodeEvent) error {
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
	var pending []*fleetAwait
	// check answers the awaits whose revision is applied and whose state
	// shows their condition.
	check := func() error {
		var err error
		pending = slices.DeleteFunc(pending, func(a *fleetAwait) bool {
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
			err = emit(FleetNodeEvent{Event: "done", Rev: a.rev, At: at, Seen: c.seen(a.rev), Early: a.checked, Sum: sum})
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
				ev, err := fleetUsage()
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
				cond, err := parseFleetCond(f[2:])
				if err != nil {
					return fmt.Errorf("await: %w", err)
				}
				pending = append(pending, &fleetAwait{rev: rev, cond: cond})
				if err := check(); err != nil {
					return err
				}
			case line == "drop" && c.drop != nil:
				stopFollow()
				if err := emit(FleetNodeEvent{Event: "dropped", FakeMapsMB: c.drop()}); err != nil {
					return err
				}
			default:
				return fmt.Errorf("unknown command %q", line)
			}
		case <-c.poke:
			v, t := c.rev.Load(), c.at.Load()
			if v > sent {
				ev := FleetNodeEvent{Event: "applied", Rev: v, At: t}
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

// fleetUsage is this process's usage event: VmRSS, VmHWM and RssAnon,
// then VmRSS after a forced GC.
func fleetUsage() (FleetNodeEvent, error) {
	u, err := etcdproc.ProcUsage(os.Getpid())
	if err != nil {
		return FleetNodeEvent{}, err
	}
	anon, err := rssAnonMB()
	if err != nil {
		return FleetNodeEvent{}, err
	}
	file, err := procStatusMB("RssFile:")
	if err != nil {
		return FleetNodeEvent{}, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	g, err := etcdproc.ProcUsage(os.Getpid())
	if err != nil {
		return FleetNodeEvent{}, err
	}
	return FleetNodeEvent{Event: "usage", RSSMB: u.RSSMB, PeakMB: u.PeakMB, RSSGCMB: g.RSSMB, AnonMB: anon, FileMB: file}, nil
}

// fleetChildFlags parses a child's flags: --etcd-endpoints, the node's
// name flag, --load-jitter, and those extra adds.
func fleetChildFlags(cmd, nameFlag string, args []string, extra func(*flag.FlagSet)) (endpoints []string, name string, jitter time.Duration, err error) {
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

// FleetAgentChildMain parses the agent child's flags (args after the
// command's name) and runs it.
func FleetAgentChildMain(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	endpoints, host, jitter, err := fleetChildFlags(FleetAgentChildArg, "host", args, nil)
	if err != nil {
		return err
	}
	return FleetAgentChild(ctx, endpoints, host, jitter, in, out)
}

// FleetAgentChild is the agent child: see FleetAgentChildArg. It returns
// when in ends or ctx does.
func FleetAgentChild(ctx context.Context, endpoints []string, host string, jitter time.Duration, in io.Reader, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	// FreeAfterLoad and LoadGCPercent as the agent role sets them (cmd/azgate).
	st, err := store.Connect(store.Options{Endpoints: endpoints, Log: quiet, LoadJitter: jitter, FreeAfterLoad: true, LoadGCPercent: store.NodeLoadGCPercent})
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := agent.NewReconciler(agent.Config{NoRetry: true, Name: host, Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), fleetLinks{})
	if err != nil {
		return err
	}
	c := newFleetChild(host)
	r.OnApplied = c.applied
	c.held = func() int { return len(r.Programmed()) }
	c.follow = func(ctx context.Context) {
		agent.Follow(ctx, quiet, st, host, r)
		r.Stop()
	}
	return c.run(ctx, in, out)
}

// FleetEdgeChildMain parses the edge child's flags (args after the
// command's name) and runs it.
func FleetEdgeChildMain(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	var profile string
	endpoints, name, jitter, err := fleetChildFlags(FleetEdgeChildArg, "name", args, func(fs *flag.FlagSet) {
		fs.StringVar(&profile, "profile", "", "write a Go CPU profile of the load to this path + .cpu and an allocation profile after it to + .heap")
	})
	if err != nil {
		return err
	}
	return FleetEdgeChild(ctx, endpoints, name, jitter, profile, in, out)
}

// FleetEdgeChild is the edge child: see FleetEdgeChildArg. It returns
// when in ends or ctx does. profile: see FleetOptions.EdgeProfile.
func FleetEdgeChild(ctx context.Context, endpoints []string, name string, jitter time.Duration, profile string, in io.Reader, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	// FreeAfterLoad and LoadGCPercent as the edge role sets them (cmd/azgate).
	st, err := store.Connect(store.Options{Endpoints: endpoints, Log: quiet, LoadJitter: jitter, FreeAfterLoad: true, LoadGCPercent: store.NodeLoadGCPercent})
	if err != nil {
		return err
	}
	defer st.Close()
	fe := newFleetEdge(name, -1)
	c := newFleetChild(name)
	fe.r.OnApplied = c.applied
	c.held = func() int { return fe.fake.RouteCount() }
	c.holds = func(cond fleetCond) (bool, string) { return cond.holds(fe.r, fe.fake) }
	c.seen = func(rev int64) int64 {
		if fe.seenRev.Load() >= rev {
			return fe.seenAt.Load()
		}
		return 0
	}
	c.follow = func(ctx context.Context) { edge.FollowShare(ctx, st, name, deliveryTap{fe.r, fe}, quiet) }
	c.drop = func() float64 {
		before := heapInUse()
		fe.fake.RouteMap, fe.fake.Counters = map[netip.Addr]dataplane.Route{}, map[uint32]dataplane.Counters{}
		return float64(before-heapInUse()) / (1 << 20)
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
	runtime.KeepAlive(fe.r)
	return err
}

// fleetProc is a child process of the bench: started and stopped by its
// PID, in a process group of its own.
type fleetProc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  tailBuffer
	started time.Time

	loaded  chan struct{} // closed at its loaded event
	load    FleetNodeEvent
	replies chan FleetNodeEvent // usage, done, dropped: answers to commands
	rev, at atomic.Int64        // the last applied revision and when (unix ns)
	done    chan struct{}       // its stdout ended and it was waited for
	err     error               // why it ended (after done)
}

// tailBuffer keeps the last 4 kB written (a child's stderr).
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = slices.Clone(t.b[len(t.b)-4096:])
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}

// fleetProcs are the children the bench started; killAll is deferred
// on every path out.
type fleetProcs struct {
	mu  sync.Mutex
	all []*fleetProc
}

// start runs bin args as child name.
func (ps *fleetProcs) start(ctx context.Context, bin, name string, args ...string) (*fleetProc, error) {
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	p := &fleetProc{name: name, loaded: make(chan struct{}), replies: make(chan FleetNodeEvent, 4), done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { p.kill(); return nil }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stderr = &p.stderr
	// Not systemd's child: the agent's follow would tell it "ready".
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "NOTIFY_SOCKET=") })
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.cmd = cmd
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fleet: child %s: %w", name, err)
	}
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		var perr error
		for sc.Scan() {
			ev, err := parseFleetNodeEvent(sc.Bytes())
			if err != nil {
				perr = err
				p.kill()
				break
			}
			p.event(ev)
		}
		io.Copy(io.Discard, stdout)
		werr := cmd.Wait()
		p.err = errors.Join(perr, werr)
	}()
	return p, nil
}

// event records ev.
func (p *fleetProc) event(ev FleetNodeEvent) {
	switch ev.Event {
	case "loaded", "applied":
		if ev.Rev > p.rev.Load() {
			p.at.Store(ev.At)
			p.rev.Store(ev.Rev)
		}
		if ev.Event == "loaded" {
			select {
			case <-p.loaded:
			default:
				p.load = ev
				close(p.loaded)
			}
		}
	default: // an answer: the bench asks one thing at a time
		select {
		case p.replies <- ev:
		default:
		}
	}
}

// failed says why p ended (its error and the end of its stderr).
func (p *fleetProc) failed() error {
	return fmt.Errorf("fleet: child %s (pid %d) ended: %v: %s", p.name, p.cmd.Process.Pid, p.err, p.stderr.String())
}

// waitLoaded waits for p's loaded event.
func (p *fleetProc) waitLoaded(ctx context.Context, limit time.Duration) error {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-p.loaded:
		return nil
	case <-p.done:
		return p.failed()
	case <-t.C:
		return fmt.Errorf("fleet: child %s (pid %d) did not load in %v", p.name, p.cmd.Process.Pid, limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ask sends p the command cmd and waits up to limit for its answer.
func (p *fleetProc) ask(ctx context.Context, cmd string, limit time.Duration) (FleetNodeEvent, error) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return FleetNodeEvent{}, fmt.Errorf("fleet: child %s: %w", p.name, err)
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case ev := <-p.replies:
		return ev, nil
	case <-p.done:
		return FleetNodeEvent{}, p.failed()
	case <-t.C:
		return FleetNodeEvent{}, fmt.Errorf("fleet: child %s (pid %d) did not answer %q in %v", p.name, p.cmd.Process.Pid, cmd, limit)
	case <-ctx.Done():
		return FleetNodeEvent{}, ctx.Err()
	}
}

// askUsage asks p for its memory.
func (p *fleetProc) askUsage(ctx context.Context) (FleetNodeEvent, error) {
	return p.ask(ctx, "usage", 30*time.Second)
}

// fleetChildSpec is a child to start: its name and arguments.
type fleetChildSpec struct {
	name string
	args []string
}

// startLoaded starts a child for each spec, parallel of them loading at
// once (each full load is a range of its share: all at once they would
// only queue in etcd; 0: all at once), and waits until each has loaded.
func (ps *fleetProcs) startLoaded(ctx context.Context, bin string, specs []fleetChildSpec, parallel int) ([]*fleetProc, error) {
	if parallel <= 0 {
		parallel = len(specs)
	}
	out := make([]*fleetProc, len(specs))
	sem := make(chan struct{}, max(parallel, 1))
	errc := make(chan error, len(specs))
	loaded := 0 // answers taken from errc
	for i, sp := range specs {
		for {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			case err := <-errc:
				loaded++
				if err != nil {
					return nil, err
				}
				continue
			}
			break
		}
		p, err := ps.start(ctx, bin, sp.name, sp.args...)
		if err != nil {
			return nil, err
		}
		out[i] = p
		go func() { errc <- p.waitLoaded(ctx, 10*time.Minute); <-sem }()
	}
	for ; loaded < len(specs); loaded++ {
		if err := <-errc; err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fleetProcUsage is the memory of a group of children at rest.
type fleetProcUsage struct {
	rss, peak, rssGC, anon []float64
}

// usageAtRest asks each of ps for its memory after 2 s of rest (the
// bench writes nothing meanwhile).
func usageAtRest(ctx context.Context, ps []*fleetProc) (fleetProcUsage, error) {
	var u fleetProcUsage
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return u, ctx.Err()
	}
	for _, p := range ps {
		ev, err := p.askUsage(ctx)
		if err != nil {
			return u, err
		}
		u.rss, u.peak, u.rssGC, u.anon = append(u.rss, ev.RSSMB), append(u.peak, ev.PeakMB), append(u.rssGC, ev.RSSGCMB), append(u.anon, ev.AnonMB)
	}
	return u, nil
}

// file is VmRSS less RssAnon of each: the file pages (the binary's).
func (u fleetProcUsage) file() []float64 {
	out := make([]float64, len(u.rss))
	for i := range u.rss {
		out[i] = u.rss[i] - u.anon[i]
	}
	return out
}

// kill ends p's process group (SIGKILL), unless p was waited for.
func (p *fleetProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // its group: Setpgid made it the leader
}

// stop closes p's stdin (the child returns), waits up to 10 s, then
// kills it and waits up to 10 s more.
func (p *fleetProc) stop() error {
	p.stdin.Close()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	p.kill()
	select {
	case <-p.done:
		return fmt.Errorf("fleet: child %s (pid %d) did not stop in 10 s: killed", p.name, p.cmd.Process.Pid)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("fleet: child %s (pid %d) not gone 10 s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// stopAll stops every child started so far, all at once, and forgets
// them.
func (ps *fleetProcs) stopAll() error {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, p := range all {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.stop() }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killAll kills every child still running and waits (bounded) for them:
// the bench's deferred cleanup.
func (ps *fleetProcs) killAll() {
	ps.mu.Lock()
	all := ps.all
	ps.all = nil
	ps.mu.Unlock()
	for _, p := range all {
		p.stdin.Close()
		p.kill()
	}
	deadline := time.After(15 * time.Second)
	for _, p := range all {
		select {
		case <-p.done:
		case <-deadline:
			return
		}
	}
}
