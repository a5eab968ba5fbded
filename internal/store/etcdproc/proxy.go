package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Proxies: etcd's gRPC proxy (`etcd grpc-proxy start`, the same binary)
// in front of the members, for the watch fan-out of many edges and
// agents (issue 19, part 2; docs/scale.md, "Watch fan-out through the
// proxy"). A proxy coalesces identical watches (same key range, same
// start revision) of its clients into one watch on a member, so the
// members serve one stream per proxy instead of one per node.
//
// etcd 3.4's grpc-proxy listens on TCP only (--listen-addr host:port; a
// unix:// address is refused), and a TCP port, even on loopback, would
// let every local user read and write the store through it. So each
// proxy runs in a network namespace of its own (unshare --net, only lo
// in it) on 127.0.0.1:23790 there, which nothing else shares, and a
// bridge forwards the proxy's unix socket in the cluster directory
// (mode 0700, like the members': root and the directory's owner only)
// to that port: each connection it accepts is dialled from inside the
// proxy's namespace. The proxy reaches the members by their sockets
// (unix sockets cross namespaces). The bridge runs in this process, or,
// with Config.Detach, as a process of its own (Config.BridgeCommand:
// the lab's `azgate-lab lab etcd-bridge`), so that it outlives `lab up`.

// ProxyAddr is where every proxy listens inside its own namespace.
const ProxyAddr = "127.0.0.1:23790"

// MaxProxies bounds StartProxies.
const MaxProxies = 16

// Proxy is one etcd gRPC proxy process and the bridge to it.
type Proxy struct {
	Name      string
	ClientURL string // unix:///DIR/NAME-client:23790, the bridge's socket
	PID       int    // the grpc-proxy process
	BridgePID int    // the bridge process (0: the bridge runs in this process)
	Log       string
	cmd       *exec.Cmd
	done      chan struct{}
	bcmd      *exec.Cmd
	bdone     chan struct{}
	br        *Bridge
}

func proxyClientName(name string) string { return name + "-client:23790" }

func (c *Cluster) proxyDataDir(name string) string {
	return filepath.Join(c.cfg.Dir, name+".data")
}

// ProxyEndpoints are the proxies' client URLs (their bridges' sockets).
func (c *Cluster) ProxyEndpoints() []string {
	out := make([]string, len(c.Proxies))
	for i, p := range c.Proxies {
		out[i] = p.ClientURL
	}
	return out
}

// StartProxies starts n gRPC proxies (p1..pn) in front of the members,
// each with its bridge, and waits until each one answers its /health
// through its socket (which the proxy answers after a read from a
// member). On failure the proxies started are stopped again. With
// Detach, the PIDs are saved (Save) for Attach and StopDir.
func (c *Cluster) StartProxies(n int) error {
	if n < 0 || n > MaxProxies {
		return fmt.Errorf("etcd proxies: %d, want 0 to %d", n, MaxProxies)
	}
	if n > 0 && c.cfg.Detach && len(c.cfg.BridgeCommand) == 0 {
		return errors.New("etcd proxies of a detached cluster need a BridgeCommand (a bridge process that outlives this one)")
	}
	for i := len(c.Proxies) + 1; i <= n; i++ {
		name := fmt.Sprintf("p%d", i)
		p := &Proxy{Name: name, ClientURL: "unix://" + filepath.Join(c.cfg.Dir, proxyClientName(name)),
			Log: filepath.Join(c.cfg.Dir, name+".log")}
		c.mu.Lock()
		c.Proxies = append(c.Proxies, p)
		c.mu.Unlock()
		if err := c.startProxy(p); err != nil {
			c.StopProxies()
			return err
		}
	}
	if c.cfg.Detach {
		if err := c.Save(); err != nil {
			c.StopProxies()
			return err
		}
	}
	for _, p := range c.Proxies {
		if err := waitHealthy(p, 30*time.Second); err != nil {
			c.StopProxies()
			return err
		}
	}
	return nil
}

func (c *Cluster) startProxy(p *Proxy) error {
	sock := strings.TrimPrefix(p.ClientURL, "unix://")
	os.Remove(sock) // left by a killed bridge
	lf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	// unshare execs sh, which brings lo up and execs the proxy: one PID.
	args := []string{"--net", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		c.cfg.Binary, "grpc-proxy", "start", "--endpoints", strings.Join(c.Endpoints(), ","),
		"--listen-addr", ProxyAddr, "--advertise-client-url", ProxyAddr, "--data-dir", c.proxyDataDir(p.Name)}
	cmd := exec.Command("unshare", args...)
	cmd.Dir = c.cfg.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCD_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	if c.cfg.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd proxy %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.mu.Lock()
	p.cmd, p.PID, p.done = cmd, cmd.Process.Pid, done
	c.mu.Unlock()
	// The bridge needs the proxy's namespace: wait until the process
	// is the proxy (past unshare and sh).
	for deadline := time.Now().Add(10 * time.Second); !isMember(p.PID, c.proxyDataDir(p.Name)); time.Sleep(20 * time.Millisecond) {
		select {
		case <-done:
			return fmt.Errorf("etcd proxy %s exited at start: %s", p.Name, tail(p.Log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd proxy %s (pid %d) did not start in 10s: %s", p.Name, p.PID, tail(p.Log))
		}
	}
	if !c.cfg.Detach {
		br, err := NewBridge(sock, p.PID, ProxyAddr)
		if err != nil {
			return fmt.Errorf("etcd proxy %s: %w", p.Name, err)
		}
		go br.Serve()
		p.br = br
		return nil
	}
	argv := append(append([]string{}, c.cfg.BridgeCommand...), BridgeArgs(sock, p.PID, ProxyAddr)...)
	bcmd := exec.Command(argv[0], argv[1:]...)
	bcmd.Stdout, bcmd.Stderr = lf, lf
	bcmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := bcmd.Start(); err != nil {
		return fmt.Errorf("etcd proxy %s: bridge: %w", p.Name, err)
	}
	bdone := make(chan struct{})
	go func() { bcmd.Wait(); close(bdone) }()
	c.mu.Lock()
	p.bcmd, p.BridgePID, p.bdone = bcmd, bcmd.Process.Pid, bdone
	c.mu.Unlock()
	return nil
}

// waitHealthy waits until the proxy answers GET /health with
// {"health":"true"} through its socket.
func waitHealthy(p *Proxy, timeout time.Duration) error {
	hc := unixHTTP(strings.TrimPrefix(p.ClientURL, "unix://"))
	defer hc.CloseIdleConnections()
	var last string
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		resp, err := hc.Get("http://proxy/health")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`) {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		} else {
			last = err.Error()
		}
		if p.done != nil {
			select {
			case <-p.done:
				return fmt.Errorf("etcd proxy %s exited: %s", p.Name, tail(p.Log))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd proxy %s did not answer /health within %v (%s): %s", p.Name, timeout, last, tail(p.Log))
		}
	}
}

// unixHTTP is an HTTP client that reaches everything through the socket
// at path.
func unixHTTP(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
}

// ProxyRunning tells whether proxy i's process is alive.
func (c *Cluster) ProxyRunning(i int) bool {
	c.mu.Lock()
	p := c.Proxies[i]
	pid := p.PID
	c.mu.Unlock()
	return pid != 0 && isMember(pid, c.proxyDataDir(p.Name))
}

// ProxyUsage reads proxy i's CPU time and memory.
func (c *Cluster) ProxyUsage(i int) (Usage, error) { return ProcUsage(c.Proxies[i].PID) }

// StopProxies stops every proxy and its bridge, by PID (SIGTERM, then
// SIGKILL after 10 s), and removes their sockets.
func (c *Cluster) StopProxies() {
	c.mu.Lock()
	ps := c.Proxies
	c.Proxies = nil
	c.mu.Unlock()
	for _, p := range ps {
		if p.br != nil {
			p.br.Close()
		}
		if p.bcmd != nil {
			stopCmd(p.bcmd, p.bdone)
		} else if p.BridgePID != 0 && isBridge(p.BridgePID, strings.TrimPrefix(p.ClientURL, "unix://")) {
			stopPID(p.BridgePID, func() bool { return isBridge(p.BridgePID, strings.TrimPrefix(p.ClientURL, "unix://")) })
		}
		if p.cmd != nil {
			stopCmd(p.cmd, p.done)
		} else if p.PID != 0 {
			data := c.proxyDataDir(p.Name)
			stopPID(p.PID, func() bool { return isMember(p.PID, data) })
		}
		os.Remove(strings.TrimPrefix(p.ClientURL, "unix://"))
	}
}

func stopCmd(cmd *exec.Cmd, done chan struct{}) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// stopPID stops a process another process started, while alive says it
// is still the one meant (PIDs are reused).
func stopPID(pid int, alive func() bool) error {
	if !alive() {
		return nil
	}
	syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); alive() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if alive() {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	return nil
}

// BridgeArgs are the flags of a bridge process (after
// Config.BridgeCommand): --socket, --netns-pid, --addr.
func BridgeArgs(sock string, pid int, addr string) []string {
	return []string{"--socket", sock, "--netns-pid", strconv.Itoa(pid), "--addr", addr}
}

// isBridge tells whether pid is a live bridge process serving sock.
func isBridge(pid int, sock string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "--socket" && i+1 < len(args) && args[i+1] == sock {
			return !isZombie(pid)
		}
	}
	return false
}

func isZombie(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(st), ')')
	return i > 0 && i+2 < len(st) && st[i+2] == 'Z'
}

// Bridge forwards the connections it accepts on a unix socket to a TCP
// address inside another network namespace (a proxy's).
type Bridge struct {
	ln    net.Listener
	nsfd  int
	addr  string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewBridge listens on sock (mode 0600; a stale file is removed) and
// holds the network namespace of process pid (so the namespace it dials
// into stays the proxy's even if the PID is reused).
func NewBridge(sock string, pid int, addr string) (*Bridge, error) {
	nsfd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bridge: network namespace of pid %d: %w", pid, err)
	}
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		unix.Close(nsfd)
		return nil, fmt.Errorf("bridge: %w", err)
	}
	os.Chmod(sock, 0o600)
	return &Bridge{ln: ln, nsfd: nsfd, addr: addr, conns: map[net.Conn]struct{}{}}, nil
}

// Serve forwards connections until Close.
func (b *Bridge) Serve() error {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return err
		}
		// Added under mu, which Close takes before it waits: a
		// connection accepted as Close runs is refused, never forwarded
		// through a namespace descriptor already closed.
		b.mu.Lock()
		closed := b.conns == nil
		if !closed {
			b.wg.Add(1)
		}
		b.mu.Unlock()
		if closed {
			c.Close()
			return net.ErrClosed
		}
		go func() {
			defer b.wg.Done()
			b.forward(c)
		}()
	}
}

func (b *Bridge) track(c net.Conn, on bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false // closed
	}
	if on {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
	return true
}

func (b *Bridge) forward(c net.Conn) {
	defer c.Close()
	up, err := dialIn(b.nsfd, b.addr)
	if err != nil {
		return
	}
	defer up.Close()
	if !b.track(c, true) || !b.track(up, true) {
		return
	}
	defer b.track(c, false)
	defer b.track(up, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// Close stops accepting, closes every forwarded connection and waits
// for the forwarders.
func (b *Bridge) Close() {
	b.ln.Close()
	b.mu.Lock()
	conns := b.conns
	b.conns = nil
	b.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	b.wg.Wait()
	unix.Close(b.nsfd)
}

// dialIn dials addr over TCP from inside the network namespace nsfd: on
// an OS thread switched into it, so the socket belongs to it.
func dialIn(nsfd int, addr string) (net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- res{nil, err}
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- res{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			// The thread stays locked and exits with the goroutine.
			if c != nil {
				c.Close()
			}
			ch <- res{nil, fmt.Errorf("setns back: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- res{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// ServeBridge is a bridge process's body (the lab's `azgate-lab lab
// etcd-bridge`): it forwards sock to addr in pid's network namespace
// until ctx ends.
func ServeBridge(ctx context.Context, sock string, pid int, addr string) error {
	b, err := NewBridge(sock, pid, addr)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); b.Close() }()
	err = b.Serve()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Metric reads member i's Prometheus metrics (GET /metrics on its
// client socket, which etcd serves there) and returns the sum of every
// sample of the metric name (all label sets), e.g.
// etcd_network_client_grpc_sent_bytes_total: the bytes of gRPC the
// member sent its clients.
func (c *Cluster) Metric(i int, name string) (float64, error) {
	hc := unixHTTP(strings.TrimPrefix(c.Members[i].ClientURL, "unix://"))
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://member/metrics")
	if err != nil {
		return 0, fmt.Errorf("etcd member %s: metrics: %w", c.Members[i].Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("etcd member %s: metrics: %s", c.Members[i].Name, resp.Status)
	}
	return sumMetric(string(b), name)
}

// sumMetric sums the samples of name in Prometheus text exposition.
func sumMetric(text, name string) (float64, error) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // a longer name
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		sum += v
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no metric %s", name)
	}
	return sum, nil
}
