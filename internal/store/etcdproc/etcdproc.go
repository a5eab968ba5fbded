// Package etcdproc runs a cluster of real etcd-server processes (Debian's
// etcd, package etcd-server) on this machine: for the tests and the
// benchmark of a region on an external etcd cluster, and for `azgate-lab lab up
// --etcd-members N` (issue 8, part 7).
//
// The members listen on unix sockets only, clients and peers alike, inside
// one directory of mode 0700: only root (and the directory's owner) can
// reach them, so an etcd without authentication is safe here, where a TCP
// port even on loopback would let every local user read and write the
// store (and forge raft messages through the peer port). Unix sockets also
// cross network namespaces, which loopback TCP does not: the lab's roles,
// each in its own namespace, reach the members by path.
//
// etcd 3.4 accepts unix:// client and peer URLs only in the form
// unix://NAME:PORT, which it listens on as the socket file "NAME:PORT"
// relative to its working directory; an absolute unix:///path is refused
// ("URL address does not have the form host:port"). So every member runs
// with the socket directory as its working directory, peers dial each
// other by those relative names, and clients use the absolute form
// unix:///DIR/NAME:PORT, which the Go client accepts.
//
// Members are stopped by PID only. The package does not import etcd's Go
// modules (only internal/store may): it runs the binary.
package etcdproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config of a cluster.
type Config struct {
	// Dir holds the sockets, the members' data and logs; it is made (or
	// forced to) mode 0700, which is what guards the sockets. Keep it
	// short: a socket path has at most 107 bytes.
	Dir string
	// Members in the cluster (3 by default).
	Members int
	// Binary is etcd-server's binary ("etcd" on the PATH by default).
	Binary string
	// Detach puts the members in their own session, so they outlive the
	// process that started them (the lab: `lab down` stops them by the
	// PIDs saved in Dir).
	Detach bool
	// MaxTxnOps is etcd's --max-txn-ops (0: etcd's default, 128).
	MaxTxnOps int
	// Extra flags for every member.
	Extra []string
	// BridgeCommand runs a proxy's bridge as a process of its own (argv
	// before BridgeArgs), which a detached cluster's proxies need: the
	// lab's `azgate-lab lab etcd-bridge`. Without Detach the bridges run
	// in this process.
	BridgeCommand []string
}

// Member is one etcd-server process.
type Member struct {
	Name      string
	ClientURL string // unix:///DIR/NAME-client:2379
	PID       int
	Log       string
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has been reaped
}

// Cluster is a running set of members.
type Cluster struct {
	cfg     Config
	mu      sync.Mutex
	Members []*Member
	Proxies []*Proxy // StartProxies (proxy.go)
}

// PIDFile is where Save writes the members' PIDs, for StopDir.
const PIDFile = "members.json"

// Binary finds etcd-server's binary.
func Binary() (string, error) {
	b, err := exec.LookPath("etcd")
	if err != nil {
		return "", errors.New("no etcd binary on the PATH: install Debian's etcd-server (apt-get install etcd-server)")
	}
	return b, nil
}

func peerName(name string) string   { return name + "-peer:2380" }
func clientName(name string) string { return name + "-client:2379" }

// Start starts cfg.Members members and waits until each one accepts
// connections on its client socket. The caller waits for a leader with a
// client (store.Connect and a read). On failure every member started is
// stopped again.
func Start(cfg Config) (*Cluster, error) {
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Binary == "" {
		b, err := Binary()
		if err != nil {
			return nil, err
		}
		cfg.Binary = b
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("etcd cluster dir: %w", err)
	}
	cfg.Dir = dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd cluster dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd cluster dir %s: %w", dir, err)
	}
	if l := len(dir) + 1 + len(clientName(fmt.Sprintf("m%d", cfg.Members))); l > 107 {
		return nil, fmt.Errorf("etcd cluster dir %s: socket paths of %d bytes are longer than the 107 a unix socket allows", dir, l)
	}
	c := &Cluster{cfg: cfg}
	var initial []string
	for i := 1; i <= cfg.Members; i++ {
		name := fmt.Sprintf("m%d", i)
		initial = append(initial, name+"=unix://"+peerName(name))
		c.Members = append(c.Members, &Member{Name: name, ClientURL: "unix://" + filepath.Join(dir, clientName(name)),
			Log: filepath.Join(dir, name+".log")})
	}
	for _, m := range c.Members {
		if err := c.start(m, "new", strings.Join(initial, ",")); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := c.waitSocket(m, 30*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.ClientURL
	}
	return out
}

func (c *Cluster) start(m *Member, state, initial string) error {
	data := filepath.Join(c.cfg.Dir, m.Name+".data")
	// A socket file left by a killed member would make the bind fail.
	os.Remove(filepath.Join(c.cfg.Dir, peerName(m.Name)))
	os.Remove(filepath.Join(c.cfg.Dir, clientName(m.Name)))
	args := []string{"--name", m.Name, "--data-dir", data,
		"--listen-client-urls", "unix://" + clientName(m.Name), "--advertise-client-urls", "unix://" + clientName(m.Name),
		"--listen-peer-urls", "unix://" + peerName(m.Name), "--initial-advertise-peer-urls", "unix://" + peerName(m.Name),
		"--initial-cluster", initial, "--initial-cluster-state", state, "--initial-cluster-token", "azgate",
		"--log-level", "warn", "--logger", "zap", "--log-outputs", "stderr"}
	if c.cfg.MaxTxnOps > 0 {
		args = append(args, "--max-txn-ops", strconv.Itoa(c.cfg.MaxTxnOps))
	}
	args = append(args, c.cfg.Extra...)
	lf, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	cmd := exec.Command(c.cfg.Binary, args...)
	cmd.Dir = c.cfg.Dir // the sockets' names are relative to it
	cmd.Stdout, cmd.Stderr = lf, lf
	// etcd reads ETCD_* variables as flags: none from our environment.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCD_") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	if c.cfg.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	c.mu.Lock()
	m.cmd, m.PID, m.done = cmd, cmd.Process.Pid, done
	c.mu.Unlock()
	return nil
}

func (c *Cluster) waitSocket(m *Member, timeout time.Duration) error {
	path := strings.TrimPrefix(m.ClientURL, "unix://")
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if conn, err := net.Dial("unix", path); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-m.done:
			return fmt.Errorf("etcd member %s exited at start: %s", m.Name, tail(m.Log))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s did not listen on %s within %v: %s", m.Name, path, timeout, tail(m.Log))
		}
	}
}

// Member returns the member of that name (nil: none).
func (c *Cluster) Member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Index returns the index of the member whose client URL is endpoint
// (-1: none).
func (c *Cluster) Index(endpoint string) int {
	for i, m := range c.Members {
		if m.ClientURL == endpoint {
			return i
		}
	}
	return -1
}

// Kill sends SIGKILL to member i, by its PID, and waits until it is gone.
func (c *Cluster) Kill(i int) error {
	m := c.Members[i]
	c.mu.Lock()
	cmd, done, pid := m.cmd, m.done, m.PID
	m.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		// A member another process started (Attach): by PID, while it
		// is still that member.
		if pid == 0 || !isMember(pid, c.dataDir(m)) {
			return fmt.Errorf("etcd member %s is not running", m.Name)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill etcd member %s (pid %d): %w", m.Name, pid, err)
		}
		for deadline := time.Now().Add(10 * time.Second); isMember(pid, c.dataDir(m)); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s (pid %d) still there 10s after SIGKILL", m.Name, pid)
			}
		}
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill etcd member %s (pid %d): %w", m.Name, pid, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("etcd member %s (pid %d) still there 10s after SIGKILL", m.Name, pid)
	}
	return nil
}

// Running tells whether member i's process is alive.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	pid := c.Members[i].PID
	c.mu.Unlock()
	return pid != 0 && isMember(pid, c.dataDir(c.Members[i]))
}

// Restart starts a killed or stopped member again on its data (with
// Detach, the saved PIDs are updated).
func (c *Cluster) Restart(i int) error {
	m := c.Members[i]
	if c.Running(i) {
		return fmt.Errorf("etcd member %s is running (pid %d)", m.Name, m.PID)
	}
	if err := c.start(m, "existing", c.initial()); err != nil {
		return err
	}
	if c.cfg.Detach {
		if err := c.Save(); err != nil {
			return err
		}
	}
	return c.waitSocket(m, 30*time.Second)
}

func (c *Cluster) initial() string {
	var initial []string
	for _, o := range c.Members {
		initial = append(initial, o.Name+"=unix://"+peerName(o.Name))
	}
	return strings.Join(initial, ",")
}

func (c *Cluster) dataDir(m *Member) string { return filepath.Join(c.cfg.Dir, m.Name+".data") }

// Stop stops every proxy, then every member (SIGTERM, then SIGKILL
// after 10 s), by PID.
func (c *Cluster) Stop() {
	c.StopProxies()
	for _, m := range c.Members {
		c.mu.Lock()
		cmd, done := m.cmd, m.done
		m.cmd = nil
		c.mu.Unlock()
		if cmd == nil {
			continue
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	}
	if c.cfg.Detach {
		StopDir(c.cfg.Dir) // members started by another process
	}
	os.Remove(filepath.Join(c.cfg.Dir, PIDFile))
}

// saved is PIDFile's content: enough to find, kill and restart the
// members from another process.
type saved struct {
	Binary    string         `json:"binary"`
	MaxTxnOps int            `json:"max_txn_ops,omitempty"`
	Extra     []string       `json:"extra,omitempty"`
	Names     []string       `json:"names"`
	Members   map[string]int `json:"members"` // name: pid
	Bridge    []string       `json:"bridge,omitempty"`
	Proxies   []savedProxy   `json:"proxies,omitempty"`
}

type savedProxy struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	BridgePID int    `json:"bridge_pid"`
}

// Save writes the members' PIDs to Dir/members.json for Attach and
// StopDir.
func (c *Cluster) Save() error {
	s := saved{Binary: c.cfg.Binary, MaxTxnOps: c.cfg.MaxTxnOps, Extra: c.cfg.Extra, Members: map[string]int{}, Bridge: c.cfg.BridgeCommand}
	c.mu.Lock()
	for _, m := range c.Members {
		s.Names = append(s.Names, m.Name)
		s.Members[m.Name] = m.PID
	}
	for _, p := range c.Proxies {
		s.Proxies = append(s.Proxies, savedProxy{Name: p.Name, PID: p.PID, BridgePID: p.BridgePID})
	}
	c.mu.Unlock()
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.cfg.Dir, PIDFile), b, 0o600)
}

func readSaved(dir string) (*saved, error) {
	b, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s saved
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, PIDFile), err)
	}
	return &s, nil
}

// Saved reads the member PIDs that Save wrote in dir (nil, nil: none).
func Saved(dir string) (map[string]int, error) {
	s, err := readSaved(dir)
	if s == nil || err != nil {
		return nil, err
	}
	return s.Members, nil
}

// Attach returns the cluster a detached Start saved in dir (nil, nil:
// none), to kill and restart its members from another process.
func Attach(dir string) (*Cluster, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s, err := readSaved(dir)
	if s == nil || err != nil {
		return nil, err
	}
	c := &Cluster{cfg: Config{Dir: dir, Members: len(s.Names), Binary: s.Binary, Detach: true, MaxTxnOps: s.MaxTxnOps, Extra: s.Extra, BridgeCommand: s.Bridge}}
	for _, n := range s.Names {
		c.Members = append(c.Members, &Member{Name: n, ClientURL: "unix://" + filepath.Join(dir, clientName(n)),
			PID: s.Members[n], Log: filepath.Join(dir, n+".log")})
	}
	for _, p := range s.Proxies {
		c.Proxies = append(c.Proxies, &Proxy{Name: p.Name, ClientURL: "unix://" + filepath.Join(dir, proxyClientName(p.Name)),
			PID: p.PID, BridgePID: p.BridgePID, Log: filepath.Join(dir, p.Name+".log")})
	}
	return c, nil
}

// StopDir stops the members a detached cluster saved in dir, by PID, from
// another process (`lab down`). A PID is signalled only while its process
// is still an etcd whose data dir is inside dir (PIDs are reused).
func StopDir(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	s, err := readSaved(dir)
	if s == nil || err != nil {
		return err
	}
	var errs []error
	for _, p := range s.Proxies {
		sock := filepath.Join(dir, proxyClientName(p.Name))
		if err := stopPID(p.BridgePID, func() bool { return p.BridgePID != 0 && isBridge(p.BridgePID, sock) }); err != nil {
			errs = append(errs, fmt.Errorf("etcd proxy %s's bridge: %w", p.Name, err))
		}
		data := filepath.Join(dir, p.Name+".data")
		if err := stopPID(p.PID, func() bool { return isMember(p.PID, data) }); err != nil {
			errs = append(errs, fmt.Errorf("etcd proxy %s: %w", p.Name, err))
		}
		os.Remove(sock)
	}
	for name, pid := range s.Members {
		if !isMember(pid, filepath.Join(dir, name+".data")) {
			continue
		}
		syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for isMember(pid, filepath.Join(dir, name+".data")) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if isMember(pid, filepath.Join(dir, name+".data")) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				errs = append(errs, fmt.Errorf("etcd member %s (pid %d): %w", name, pid, err))
			}
		}
	}
	os.Remove(filepath.Join(dir, PIDFile))
	return errors.Join(errs...)
}

// isMember tells whether pid is a live (not zombie) etcd run with data.
func isMember(pid int, data string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	if len(args) == 0 || filepath.Base(args[0]) != "etcd" {
		return false
	}
	found := false
	for i, a := range args {
		if a == "--data-dir" && i+1 < len(args) && args[i+1] == data {
			found = true
		}
	}
	if !found {
		return false
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
		return false
	}
	return true
}

// Usage is a member's resource use, from /proc/PID.
type Usage struct {
	CPU    time.Duration // user + system
	RSSMB  float64
	PeakMB float64
}

// Usage reads member i's CPU time and memory.
func (c *Cluster) Usage(i int) (Usage, error) { return ProcUsage(c.Members[i].PID) }

// ProcUsage reads a process's CPU time (utime+stime from /proc/PID/stat,
// in clock ticks of 100 Hz, the USER_HZ Linux exports everywhere) and
// resident memory (VmRSS, VmHWM from /proc/PID/status).
func ProcUsage(pid int) (Usage, error) {
	var u Usage
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	s := string(st)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	// Fields after the name: state is f[0]; utime and stime are the
	// 14th and 15th fields of the line, f[11] and f[12] here.
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stt, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+stt) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fs[1], 64)
		switch fs[0] {
		case "VmRSS:":
			u.RSSMB = kb / 1024
		case "VmHWM:":
			u.PeakMB = kb / 1024
		}
	}
	return u, nil
}

// tail returns the end of a log file, for errors.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}
