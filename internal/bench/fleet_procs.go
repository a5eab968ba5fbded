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
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/agent"
	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdproc"
)

// The fleet's child processes (issue 19, part 4: nodes as real
// processes): `azgate-lab bench fleet fleet-agent` runs one agent
// Reconciler on the data-plane fakes for one host, following its host's
// share with the agent role's own follow (agent.Follow). It reads
// commands on stdin, one a line, and exits at its end (so a child never
// outlives the bench's pipe), and writes events on stdout, a JSON object
// a line (FleetNodeEvent):
//
//	{"event":"loaded","name":"h0","rev":812,"at":1765...,"load_s":0.41,"eips":1000}
//	{"event":"applied","name":"h0","rev":815,"at":1765...}
//	{"event":"usage","name":"h0","rss_mb":54.2,"peak_mb":54.5,"rss_gc_mb":47.0,"anon_mb":23.1}
//
// "at" is the wall clock (unix ns) when the revision was applied: the
// bench and its children share this machine's clock. Commands: "usage"
// (the child answers with a usage event).

// FleetAgentChildArg is the hidden command an agent child runs as
// (`azgate-lab bench fleet fleet-agent`).
const FleetAgentChildArg = "fleet-agent"

// FleetNodeEvent is a line a child writes.
type FleetNodeEvent struct {
	Event string `json:"event"` // loaded, applied, usage
	Name  string `json:"name"`
	Rev   int64  `json:"rev,omitempty"`
	At    int64  `json:"at,omitempty"` // unix ns
	// loaded: from the follow's start (its load jitter included) to the
	// first applied revision, and the EIPs programmed then.
	LoadS float64 `json:"load_s,omitempty"`
	EIPs  int     `json:"eips,omitempty"`
	// usage: VmRSS as it is, VmHWM, and VmRSS after a forced GC and
	// debug.FreeOSMemory.
	RSSMB   float64 `json:"rss_mb,omitempty"`
	PeakMB  float64 `json:"peak_mb,omitempty"`
	RSSGCMB float64 `json:"rss_gc_mb,omitempty"`
	// RssAnon then: VmRSS less the file pages (the executable's text and
	// data, shared by every process of the binary).
	AnonMB float64 `json:"anon_mb,omitempty"`
}

// rssAnonMB reads RssAnon from /proc/self/status.
func rssAnonMB() (float64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "RssAnon:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("/proc/self/status: no RssAnon")
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
	case "loaded", "applied":
		if ev.Rev <= 0 || ev.At <= 0 {
			return ev, fmt.Errorf("child event %q: no revision or time", line)
		}
	case "usage":
		if ev.RSSMB <= 0 || ev.PeakMB <= 0 {
			return ev, fmt.Errorf("child event %q: no RSS", line)
		}
	default:
		return ev, fmt.Errorf("child event %q: unknown event %q", line, ev.Event)
	}
	return ev, nil
}

// FleetAgentChildMain parses the agent child's flags (args after the
// command's name) and runs it.
func FleetAgentChildMain(ctx context.Context, args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet(FleetAgentChildArg, flag.ContinueOnError)
	endpoints := fs.String("etcd-endpoints", "", "etcd client URLs, comma-separated")
	host := fs.String("host", "", "the host this agent is for (h0, h1, ...)")
	jitter := fs.Duration("load-jitter", 0, "store.Options.LoadJitter: wait a random share of it before each full load (as --etcd-load-jitter)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoints == "" || *host == "" || fs.NArg() > 0 {
		return fmt.Errorf("%s: want --etcd-endpoints and --host, and no arguments", FleetAgentChildArg)
	}
	return FleetAgentChild(ctx, strings.Split(*endpoints, ","), *host, *jitter, in, out)
}

// FleetAgentChild is the agent child: see FleetAgentChildArg. It returns
// when in ends or ctx does.
func FleetAgentChild(ctx context.Context, endpoints []string, host string, jitter time.Duration, in io.Reader, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	// FreeAfterLoad as the agent role sets it (cmd/azgate).
	st, err := store.Connect(store.Options{Endpoints: endpoints, Log: quiet, LoadJitter: jitter, FreeAfterLoad: true})
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := agent.NewReconciler(agent.Config{NoRetry: true, Name: host, Underlay: "ul0", Log: quiet}, dataplane.NewFakeAgent(), fleetLinks{})
	if err != nil {
		return err
	}
	var mu sync.Mutex // out
	emit := func(ev FleetNodeEvent) error {
		ev.Name = host
		b, _ := json.Marshal(ev)
		mu.Lock()
		defer mu.Unlock()
		_, err := out.Write(append(b, '\n'))
		return err
	}
	// OnApplied runs under the Reconciler's lock: it only notes the
	// revision; the loop below writes it out.
	var rev, at atomic.Int64
	poke := make(chan struct{}, 1)
	r.OnApplied = func(v int64) {
		if v > rev.Load() {
			at.Store(time.Now().UnixNano())
			rev.Store(v)
		}
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := make(chan struct{})
	started := time.Now()
	go func() {
		defer close(followed)
		agent.Follow(fctx, quiet, st, host, r)
		r.Stop()
	}()
	defer func() {
		cancel()
		select {
		case <-followed:
		case <-time.After(10 * time.Second):
		}
	}()
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case cmds <- strings.TrimSpace(sc.Text()):
			case <-fctx.Done():
				return
			}
		}
	}()
	var sent int64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c, ok := <-cmds:
			if !ok {
				return nil // the bench closed our stdin (or died)
			}
			if c != "usage" {
				return fmt.Errorf("unknown command %q", c)
			}
			u, err := etcdproc.ProcUsage(os.Getpid())
			if err != nil {
				return err
			}
			anon, err := rssAnonMB()
			if err != nil {
				return err
			}
			runtime.GC()
			debug.FreeOSMemory()
			g, err := etcdproc.ProcUsage(os.Getpid())
			if err != nil {
				return err
			}
			if err := emit(FleetNodeEvent{Event: "usage", RSSMB: u.RSSMB, PeakMB: u.PeakMB, RSSGCMB: g.RSSMB, AnonMB: anon}); err != nil {
				return err
			}
		case <-poke:
			v, t := rev.Load(), at.Load()
			if v <= sent {
				continue
			}
			ev := FleetNodeEvent{Event: "applied", Rev: v, At: t}
			if sent == 0 {
				ev.Event, ev.LoadS, ev.EIPs = "loaded", float64(t-started.UnixNano())/1e9, len(r.Programmed())
			}
			if err := emit(ev); err != nil {
				return err
			}
			sent = v
		}
	}
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
	usage   chan FleetNodeEvent
	rev, at atomic.Int64  // the last applied revision and when (unix ns)
	done    chan struct{} // its stdout ended and it was waited for
	err     error         // why it ended (after done)
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
	p := &fleetProc{name: name, loaded: make(chan struct{}), usage: make(chan FleetNodeEvent, 1), done: make(chan struct{})}
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
	case "usage":
		select {
		case p.usage <- ev:
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

// askUsage asks p for its memory.
func (p *fleetProc) askUsage(ctx context.Context) (FleetNodeEvent, error) {
	if _, err := io.WriteString(p.stdin, "usage\n"); err != nil {
		return FleetNodeEvent{}, fmt.Errorf("fleet: child %s: %w", p.name, err)
	}
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case ev := <-p.usage:
		return ev, nil
	case <-p.done:
		return FleetNodeEvent{}, p.failed()
	case <-t.C:
		return FleetNodeEvent{}, fmt.Errorf("fleet: child %s (pid %d) gave no usage in 30 s", p.name, p.cmd.Process.Pid)
	case <-ctx.Done():
		return FleetNodeEvent{}, ctx.Err()
	}
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
