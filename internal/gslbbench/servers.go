package gslbbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// server is one DNS server process the bench started.
type server struct {
	name   string
	addr   netip.AddrPort
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	err    error // after exited
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 { // keep the beginning; enough to explain a failure
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs cmd with its stderr kept, killed if the bench dies
// (Pdeathsig), and watches for its exit.
func startServer(name string, addr netip.AddrPort, cmd *exec.Cmd) (*server, error) {
	s := &server{name: name, addr: addr, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// stop sends SIGTERM to the process the bench started (by its PID) and
// kills it if it has not exited within 5 s.
func (s *server) stop() {
	if s == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// cpu is the process's user+system CPU time so far (/proc/PID/stat,
// all its threads; clock ticks of 1/100 s).
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", s.name, err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: /proc stat %q", s.name, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: /proc stat %q", s.name, b)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64) // field 14, utime
	st, err2 := strconv.ParseUint(f[12], 10, 64) // field 15, stime
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%s: /proc stat: %w", s.name, err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// runqueueWait is the time the process's threads have spent runnable
// but waiting for a CPU (the second field of each
// /proc/PID/task/TID/schedstat, in ns; threads that exited are not
// counted, and neither server ends threads while serving).
func (s *server) runqueueWait() (time.Duration, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", s.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("%s: no schedstat (CONFIG_SCHEDSTATS?): %v", s.name, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, fmt.Errorf("%s: %s: %q", s.name, t, b)
		}
		ns, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: %w", s.name, t, err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// udpDrops is the drop count of the UDP socket bound to ap
// (/proc/net/udp, last column): datagrams the kernel discarded because
// the socket's receive buffer was full. ap is IPv4.
func udpDrops(ap netip.AddrPort) (uint64, error) {
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		return 0, err
	}
	a := ap.Addr().As4()
	// The address is the kernel's __be32 printed as a host-order
	// (little-endian here) integer; the port is in host order.
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], ap.Port())
	var sum uint64
	found := false
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 13 || f[1] != want {
			continue
		}
		n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/net/udp %q: %w", line, err)
		}
		sum, found = sum+n, true
	}
	if !found {
		return 0, fmt.Errorf("/proc/net/udp: no socket on %s (%s)", ap, want)
	}
	return sum, nil
}

// serverCmd is a server's command: pinned to ServerCPUs, and run as
// User through setpriv when one is set (with its parent-death signal
// set again after the credential change, which clears it).
func (o *Options) serverCmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	if o.User != "" {
		args = append([]string{"--reuid=" + strconv.Itoa(o.uid), "--regid=" + strconv.Itoa(o.gid),
			"--clear-groups", "--pdeathsig=KILL", name}, args...)
		name = o.setpriv
	}
	return pinned(ctx, o.taskset, o.ServerCPUs, name, args...)
}

// cpuProfileName is where, in the run's directory, our server writes
// its CPU profile (Options.CPUProfile).
const cpuProfileName = "azgate.cpu.prof"

// startOurs writes the child's config and starts `azgate-lab bench
// gslb-serve` (argv), pinned, with GOMAXPROCS=threads, and waits for its
// "ready" line.
func startOurs(ctx context.Context, o *Options, dir string, addr netip.AddrPort, mmdb string) (*server, error) {
	cfg := ServeConfig{Addr: addr.String(), MMDB: mmdb, Zone: OurZone(), Probe: o.Probe}
	if o.CPUProfile != "" {
		cfg.CPUProfile = filepath.Join(dir, cpuProfileName)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "azgate-serve.json")
	if err := newFile(path, b, o.uid, o.gid); err != nil {
		return nil, err
	}
	argv := append(append([]string(nil), o.ServeArgv...), "--config", path)
	cmd := o.serverCmd(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(o.Threads)), o.ServeEnv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s, err := startServer("azgate", addr, cmd)
	if err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				select {
				case ready <- sc.Text():
				default:
				}
			}
		}
	}()
	select {
	case line := <-ready:
		o.Out("azgate: %s (pid %d)", line, cmd.Process.Pid)
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("azgate gslb-serve exited: %v: %s", s.err, tail(s.stderr.String(), 2000))
	case <-time.After(15 * time.Second):
		s.stop()
		return nil, fmt.Errorf("azgate gslb-serve: not ready after 15 s: %s", tail(s.stderr.String(), 2000))
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
}

// startGdnsd starts `gdnsd -c CONFDIR start` (foreground), pinned, and
// waits until it answers.
func startGdnsd(ctx context.Context, o *Options, confDir string, addr netip.AddrPort) (*server, error) {
	cmd := o.serverCmd(ctx, o.gdnsd, "-c", confDir, "start")
	s, err := startServer("gdnsd", addr, cmd)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := ask(addr, "www.example.", dns.TypeA, netip.Prefix{}); err == nil {
			o.Out("gdnsd: serving on %s (pid %d)", addr, cmd.Process.Pid)
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("gdnsd exited: %v: %s", s.err, tail(s.stderr.String(), 2000))
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("gdnsd: not answering on %s after 15 s: %s", addr, tail(s.stderr.String(), 2000))
		}
	}
}

// ask sends one UDP query, with ECS when ecs is valid.
func ask(srv netip.AddrPort, name string, qtype uint16, ecs netip.Prefix) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = false
	if ecs.IsValid() {
		o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		o.SetUDPSize(1232)
		fam := uint16(1)
		if ecs.Addr().Is6() {
			fam = 2
		}
		o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: fam,
			SourceNetmask: uint8(ecs.Bits()), Address: ecs.Addr().AsSlice()})
		m.Extra = append(m.Extra, o)
	}
	c := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	r, _, err := c.Exchange(m, srv.String())
	if err != nil {
		return nil, err
	}
	return r, nil
}

// firstA is the first A record's address of an answer.
func firstA(m *dns.Msg) (netip.Addr, bool) {
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, ok := netip.AddrFromSlice(a.A.To4())
			return ip, ok
		}
	}
	return netip.Addr{}, false
}

// scopeOf is the answer's ECS scope, -1 without ECS.
func scopeOf(m *dns.Msg) int {
	if o := m.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*dns.EDNS0_SUBNET); ok {
				return int(s.SourceScope)
			}
		}
	}
	return -1
}

// freePort finds a port free for both TCP and UDP on every address.
func freePort(addrs ...netip.Addr) (uint16, error) {
	var last error
	for range 50 {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addrs[0], 0).String())
		if err != nil {
			return 0, err
		}
		port := uint16(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		ok := true
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, port).String()
			t, err := net.Listen("tcp", ap)
			if err != nil {
				ok, last = false, err
				break
			}
			u, err := net.ListenPacket("udp", ap)
			t.Close()
			if err != nil {
				ok, last = false, err
				break
			}
			u.Close()
		}
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port on %v: %w", addrs, last)
}

// vip is a regional VIP: a TCP listener on loopback that both servers
// probe. Closing it is the region dying (connections are refused at once).
type vip struct {
	addr netip.AddrPort
	mu   sync.Mutex
	ln   net.Listener
}

func (v *vip) open() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", v.addr.String())
	if err != nil {
		return fmt.Errorf("VIP listener %s: %w", v.addr, err)
	}
	v.ln = ln
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}

func (v *vip) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ln != nil {
		v.ln.Close()
		v.ln = nil
	}
}
