package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/azgate/azgate/internal/lab"
)

// The bench's child processes are azgate-fleetnode's (package
// fleetnode: its doc has their protocol): the edge and agent roles' code
// on the data-plane fakes, without the lab, the controller or the etcd
// server azgate-lab links, so that their memory is a node's.

// defaultFleetBinary is the children's executable when
// FleetOptions.Binary is empty: azgate-fleetnode beside this executable,
// where make build and make install put it beside azgate-lab (this
// package's tests: the test binary, whose TestMain runs the children).
var defaultFleetBinary = func() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(exe), fleetnode.BinaryName), nil
}

// fleetBinary is bin (default: defaultFleetBinary), made absolute, or
// an error naming it and how to build it if it is not an executable.
func fleetBinary(bin string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = defaultFleetBinary(); err != nil {
			return "", err
		}
	}
	if err := lab.CheckExecutable(bin); err != nil {
		return "", fmt.Errorf("fleet: the edge and agent processes run %s (the node roles' code on the data-plane fakes): %w (build it with make build, which puts bin/%s beside bin/azgate-lab, or name it with --fleetnode PATH)", fleetnode.BinaryName, err, fleetnode.BinaryName)
	}
	if strings.ContainsRune(bin, '/') {
		if abs, err := filepath.Abs(bin); err == nil {
			bin = abs
		}
	}
	return bin, nil
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
	load    fleetnode.Event
	replies chan fleetnode.Event // usage, done, dropped: answers to commands
	rev, at atomic.Int64         // the last applied revision and when (unix ns)
	done    chan struct{}        // its stdout ended and it was waited for
	err     error                // why it ended (after done)
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
		return nil, fmt.Errorf("fleet: child %s: no executable (fleetBinary)", name)
	}
	p := &fleetProc{name: name, loaded: make(chan struct{}), replies: make(chan fleetnode.Event, 4), done: make(chan struct{})}
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
			ev, err := fleetnode.ParseEvent(sc.Bytes())
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
func (p *fleetProc) event(ev fleetnode.Event) {
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
func (p *fleetProc) ask(ctx context.Context, cmd string, limit time.Duration) (fleetnode.Event, error) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return fleetnode.Event{}, fmt.Errorf("fleet: child %s: %w", p.name, err)
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case ev := <-p.replies:
		return ev, nil
	case <-p.done:
		return fleetnode.Event{}, p.failed()
	case <-t.C:
		return fleetnode.Event{}, fmt.Errorf("fleet: child %s (pid %d) did not answer %q in %v", p.name, p.cmd.Process.Pid, cmd, limit)
	case <-ctx.Done():
		return fleetnode.Event{}, ctx.Err()
	}
}

// askUsage asks p for its memory.
func (p *fleetProc) askUsage(ctx context.Context) (fleetnode.Event, error) {
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
	rss, peak, rssGC, anon, file []float64
}

// usageAtRest asks each of ps for its memory after 2 s of rest (the
// bench writes nothing meanwhile) and says each child's: VmRSS and
// VmHWM, RssAnon and RssFile, VmRSS after a forced GC.
func usageAtRest(ctx context.Context, ps []*fleetProc, say func(string, ...any)) (fleetProcUsage, error) {
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
		say("  %s (pid %d): VmRSS %.1f MB, VmHWM %.1f MB; RssAnon %.1f MB, RssFile %.1f MB; VmRSS after a forced GC %.1f MB",
			p.name, p.cmd.Process.Pid, ev.RSSMB, ev.PeakMB, ev.AnonMB, ev.FileMB, ev.RSSGCMB)
		u.rss, u.peak, u.rssGC = append(u.rss, ev.RSSMB), append(u.peak, ev.PeakMB), append(u.rssGC, ev.RSSGCMB)
		u.anon, u.file = append(u.anon, ev.AnonMB), append(u.file, ev.FileMB)
	}
	return u, nil
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
