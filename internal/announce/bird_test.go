package announce

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/bgp"
	"github.com/azgate/azgate/internal/bgp/birdtest"
	"github.com/azgate/azgate/internal/nodemetrics"
	"github.com/azgate/azgate/internal/probe"
)

// childEnv carries a JSON Config to a re-executed test binary that runs
// one announcer as its own process (SIGTERM and SIGKILL are sent to it).
const childEnv = "AZGATE_ANNOUNCE_CHILD"

// The tests run in a namespace of their own (birdtest.Main); the router
// is BIRD in another, on 198.18.250.0/24: router .1, servers .11-.14.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	birdtest.Main(m, "azgt-announce-")
}

// runChild is an announcer process: what `azgate announce` runs, with its
// configuration from the environment.
func runChild(js string) int {
	var c Config
	if err := json.Unmarshal([]byte(js), &c); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	c.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	a, err := New(c, bgp.New(c.Log))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "announce:", err)
		return 1
	}
	return 0
}

var (
	routerAddr = netip.MustParseAddr("198.18.250.1")
	vip        = netip.MustParsePrefix("192.0.2.200/32")
)

const (
	routerASN  = 64512
	clusterASN = 64700
	hold       = 3 * time.Second
)

// server is one cluster member's local services: a heartbeat endpoint
// (answers 200 or 503) and a TCP listener standing for Redis.
type server struct {
	addr   netip.Addr // on the router's segment: next hop and BGP source
	status atomic.Int32
	hb     *httptest.Server
	redis  net.Listener
	port   uint16 // redis's
}

func newServer(t *testing.T, addr netip.Addr) *server {
	s := &server{addr: addr}
	s.status.Store(200)
	s.hb = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(s.status.Load()))
	}))
	t.Cleanup(s.hb.Close)
	s.openRedis(t)
	s.port = uint16(s.redis.Addr().(*net.TCPAddr).Port)
	t.Cleanup(func() { s.redis.Close() })
	return s
}

// openRedis listens on the server's Redis port (a new one the first time).
func (s *server) openRedis(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s.redis = ln
}

func (s *server) config(t *testing.T) Config {
	t.Helper()
	base := probe.Spec{Interval: 200 * time.Millisecond, Timeout: 150 * time.Millisecond, Rise: 2, Fall: 2}
	hb, err := ParseCheck(s.hb.URL+"/healthz", base)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := ParseCheck(fmt.Sprintf("tcp://127.0.0.1:%d", s.port), base)
	if err != nil {
		t.Fatal(err)
	}
	return Config{VIPs: []netip.Prefix{vip}, Checks: []probe.Target{hb, rd}, WithdrawWait: 3 * time.Second,
		BGP: bgp.Config{RouterID: s.addr, ASN: clusterASN, NextHop: s.addr, LocalAddress: s.addr, HoldTime: hold,
			Keepalive: time.Second, Peers: []bgp.Peer{{Address: routerAddr, ASN: routerASN}}}}
}

// child runs s's announcer as a process of its own.
type child struct {
	cmd  *exec.Cmd
	done chan error
	log  string
}

func startChild(t *testing.T, s *server) *child {
	t.Helper()
	js, err := json.Marshal(s.config(t))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+string(js))
	return startProcess(t, s, cmd)
}

// buildAzgate builds the azgate binary (cmd/azgate) for the test.
func buildAzgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "azgate")
	start := time.Now()
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/azgate").CombinedOutput()
	if err != nil {
		t.Fatalf("go build azgate: %v\n%s", err, out)
	}
	t.Logf("built azgate in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// startAzgate runs `azgate announce` for s, as an operator would, with
// an MD5 password file and the loopback status listener.
func startAzgate(t *testing.T, bin string, s *server, pwFile, status string) *child {
	t.Helper()
	cmd := exec.Command(bin, "announce", "--vip", vip.String(), "--asn", fmt.Sprint(clusterASN),
		"--peer", fmt.Sprintf("%v:%d,password-file=%s", routerAddr, routerASN, pwFile),
		"--next-hop", s.addr.String(), "--local-address", s.addr.String(),
		"--check", s.hb.URL+"/healthz", "--check", fmt.Sprintf("tcp://127.0.0.1:%d", s.port),
		"--interval", "200ms", "--timeout", "150ms", "--rise", "2", "--fall", "2",
		"--hold", hold.String(), "--keepalive", "1s", "--withdraw-wait", "3s", "--status-listen", status)
	return startProcess(t, s, cmd)
}

func startProcess(t *testing.T, s *server, cmd *exec.Cmd) *child {
	t.Helper()
	c := &child{cmd: cmd, done: make(chan error, 1), log: filepath.Join(t.TempDir(), "announce.log")}
	out, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = out, out
	// Dies with the test process, whatever happens.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			c.cmd.Process.Kill() // by PID: the process this test started
			<-c.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("announcer %s log:\n%s", s.addr, b)
		}
	})
	return c
}

// wait returns the child's exit error once it exits (within timeout).
func (c *child) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		return err
	case <-time.After(timeout):
		t.Fatalf("announcer %d did not exit within %v", c.cmd.Process.Pid, timeout)
		return nil
	}
}

// dropFrom makes addr's server unreachable from the router, as a machine
// that died: nothing it sends reaches the router any more (not even the
// FIN the kernel sends when a process is killed). The rule goes with the
// test's namespace.
func dropFrom(t *testing.T, addr netip.Addr) {
	t.Helper()
	rules := fmt.Sprintf("table inet azgtann {\n chain out {\n  type filter hook output priority 0;\n  ip saddr %v drop\n }\n}\n", addr)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", "azgtann").Run() })
}

// TestAnnouncerECMP: four servers announce the VIP to a real BIRD router;
// its kernel table has one multipath route over the servers whose checks
// pass. A failing heartbeat (503) or a closed Redis port removes a
// server's next hop and recovery brings it back; SIGTERM removes it at
// once (withdrawn before exit); SIGKILL removes it at once too (the
// kernel closes the session); a server that dies without a word (its
// packets dropped, then killed) is removed when the hold timer expires.
func TestAnnouncerECMP(t *testing.T) {
	r := birdtest.New(t, "r")
	addrs := []netip.Addr{netip.MustParseAddr("198.18.250.11"), netip.MustParseAddr("198.18.250.12"),
		netip.MustParseAddr("198.18.250.13"), netip.MustParseAddr("198.18.250.14")}
	var local []netip.Prefix
	var peers []birdtest.Peer
	for i, a := range addrs {
		local = append(local, netip.PrefixFrom(a, 24))
		peers = append(peers, birdtest.Peer{Name: fmt.Sprintf("srv%d", i+1), Address: a, ASN: clusterASN})
	}
	peers[1].Password = md5Password
	bin := buildAzgate(t)
	r.Link(t, "srv0", "azgtann0", netip.PrefixFrom(routerAddr, 24), local...)
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: int(hold / time.Second), Peers: peers})

	srv := make([]*server, len(addrs))
	for i, a := range addrs {
		srv[i] = newServer(t, a)
	}

	// Server 1 runs in this process (its checks are broken and mended);
	// servers 2-4 are processes of their own.
	cfg1 := srv[0].config(t)
	cfg1.Log = slog.New(slog.DiscardHandler)
	a1, err := New(cfg1, bgp.New(cfg1.Log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run1 := make(chan error, 1)
	go func() { run1 <- a1.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-run1
	})
	// Server 2 is the real `azgate announce`, its session with MD5.
	pw := filepath.Join(t.TempDir(), "bgp-password")
	if err := os.WriteFile(pw, []byte(md5Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	statusAddr := freePort(t)
	kids := []*child{nil, startAzgate(t, bin, srv[1], pw, statusAddr), startChild(t, srv[2]), startChild(t, srv[3])}

	d := r.WaitNextHops(t, vip, addrs, 30*time.Second)
	t.Logf("VIP over all four servers after %v:\n%s", d, r.IPRoute())
	if !a1.Announced() {
		t.Fatal("server 1 in the route but not Announced")
	}

	// A failing heartbeat withdraws server 1; a good one brings it back.
	srv[0].status.Store(503)
	d = r.WaitNextHops(t, vip, addrs[1:], 5*time.Second)
	t.Logf("heartbeat 503: server 1 out of the route after %v", d)
	st := status(t, a1)
	if st.Announced || st.Checks[0].Up || st.Checks[0].LastErr != "HTTP 503" || !st.Checks[1].Up {
		t.Fatalf("status with the heartbeat failing: %+v", st)
	}
	metrics := get(t, a1, "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`azgate_announce_announced{vip="%v"} 0`, vip),
		fmt.Sprintf(`azgate_announce_check_up{check="%s/healthz"} 0`, srv[0].hb.URL),
		fmt.Sprintf(`azgate_announce_check_up{check="tcp://127.0.0.1:%d"} 1`, srv[0].port),
		fmt.Sprintf(`azgate_announce_bgp_session_established{peer="%v"} 1`, routerAddr),
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics)
		}
	}
	srv[0].status.Store(200)
	r.WaitNextHops(t, vip, addrs, 5*time.Second)

	// The real binary's status listener, on loopback: its series carry
	// the host's name as node.
	m2 := httpGet(t, "http://"+statusAddr+"/metrics")
	node := nodemetrics.HostNode()
	for _, want := range []string{
		fmt.Sprintf(`azgate_announce_announced{node="%s",vip="%v"} 1`, node, vip),
		fmt.Sprintf(`azgate_announce_check_up{check="%s/healthz",node="%s"} 1`, srv[1].hb.URL, node),
		fmt.Sprintf(`azgate_announce_bgp_session_established{node="%s",peer="%v"} 1`, node, routerAddr),
	} {
		if !strings.Contains(m2, want) {
			t.Errorf("azgate announce /metrics lack %q:\n%s", want, m2)
		}
	}
	var st2 Status
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+statusAddr+"/status")), &st2); err != nil {
		t.Fatal(err)
	}
	if !st2.Announced || len(st2.Checks) != 2 || len(st2.BGP.Sessions) != 1 || st2.BGP.Sessions[0].Advertised != 1 {
		t.Fatalf("azgate announce /status: %+v", st2)
	}

	// Redis's port closed: withdrawn; open again: back.
	srv[0].redis.Close()
	d = r.WaitNextHops(t, vip, addrs[1:], 5*time.Second)
	t.Logf("redis port closed: server 1 out of the route after %v", d)
	srv[0].openRedis(t)
	r.WaitNextHops(t, vip, addrs, 5*time.Second)
	if st := status(t, a1); !st.Announced || st.Changes != 5 {
		t.Fatalf("status after recovering: %+v (want 5 changes: up, down, up, down, up)", st)
	}

	// SIGTERM: server 2 withdraws, waits for the withdrawal to be sent,
	// and exits; the router has dropped it by then.
	start := time.Now()
	if err := kids[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := kids[1].wait(t, 5*time.Second); err != nil {
		t.Fatalf("announcer exit after SIGTERM: %v", err)
	}
	exited := time.Since(start)
	d = r.WaitNextHops(t, vip, []netip.Addr{addrs[0], addrs[2], addrs[3]}, time.Second)
	t.Logf("SIGTERM: process exited after %v, route without server 2 %v later", exited, d)
	if d > 200*time.Millisecond {
		t.Errorf("route kept server 2 %v after its announcer exited: the withdrawal was not sent before exit", d)
	}

	// SIGKILL: the kernel closes the session (FIN), BIRD drops the route.
	start = time.Now()
	if err := kids[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d = r.WaitNextHops(t, vip, []netip.Addr{addrs[0], addrs[3]}, hold+2*time.Second)
	t.Logf("SIGKILL: server 3 out of the route after %v", d)
	kids[2].wait(t, 5*time.Second)

	// A dead machine: nothing more arrives from server 4, then it is
	// killed (its FIN is dropped too). The route stays until BIRD's hold
	// timer (3 s) expires.
	dropFrom(t, addrs[3])
	start = time.Now()
	if err := kids[3].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	kids[3].wait(t, 5*time.Second)
	d = r.WaitNextHops(t, vip, addrs[:1], hold+3*time.Second)
	took := time.Since(start)
	t.Logf("silent death: server 4 out of the route after %v (hold %v)", took, hold)
	// BIRD says why it dropped the session (the hold timer, where the
	// SIGKILL above was a close), and it took far longer than a close.
	out, err := r.Protocols()
	if err != nil || !strings.Contains(protoLine(out, "srv4"), "Hold timer expired") || !strings.Contains(protoLine(out, "srv3"), "Connection closed") {
		t.Errorf("BIRD does not say server 3's session closed and server 4's hold timer expired (%v):\n%s", err, out)
	}
	if took < time.Second {
		t.Errorf("server 4 left the route after %v: sooner than its hold timer (%v, keepalive 1 s) expires", took, hold)
	}
	t.Logf("birdc show protocols:\n%s", out)

	// The last one shuts down (in-process): the route is gone when Run
	// returns.
	cancel()
	if err := <-run1; err != nil {
		t.Fatalf("Run: %v", err)
	}
	run1 <- nil
	r.WaitNextHops(t, vip, nil, 200*time.Millisecond)
}

const md5Password = "i11-announce-md5"

// freePort returns a loopback address with a port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// protoLine is name's line in `birdc show protocols`.
func protoLine(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return l
		}
	}
	return ""
}

func status(t *testing.T, a *Announcer) Status {
	t.Helper()
	var st Status
	if err := json.Unmarshal([]byte(get(t, a, "/status")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func get(t *testing.T, a *Announcer, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}
