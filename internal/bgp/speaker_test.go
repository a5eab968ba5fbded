package bgp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"

	"github.com/azgate/azgate/internal/bgp/birdtest"
)

// The tests run in a namespace of their own (birdtest.Main); the router
// is BIRD in another, on 192.0.2.0/24: router .1, speakers .2, .3, .4.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(helperEnv); cfg != "" {
		helperSpeaker(cfg)
		return
	}
	birdtest.Main(m, "azgt-bgp-")
}

var (
	routerAddr = netip.MustParseAddr("192.0.2.1")
	spkA       = netip.MustParseAddr("192.0.2.2")
	spkB       = netip.MustParseAddr("192.0.2.3")
	spkChild   = netip.MustParseAddr("192.0.2.4")
	setPrefix  = netip.MustParsePrefix("198.51.100.0/24")
	pulledOut  = netip.MustParsePrefix("198.51.100.7/32")
)

const (
	routerASN = 64512
	edgeASN   = 64601
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// router starts BIRD linked to the test's namespace, with one session per
// speaker address given.
func router(t *testing.T, password string, speakers ...netip.Addr) *birdtest.Router {
	t.Helper()
	r := birdtest.New(t, "r")
	var local []netip.Prefix
	var peers []birdtest.Peer
	for _, a := range []netip.Addr{spkA, spkB, spkChild} {
		local = append(local, netip.PrefixFrom(a, 24))
	}
	r.Link(t, "up0", "azgtbgp0", netip.PrefixFrom(routerAddr, 24), local...)
	for _, a := range speakers {
		peers = append(peers, birdtest.Peer{Name: peerName(a), Address: a, ASN: edgeASN, Password: password})
	}
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, Peers: peers, HoldTime: 3})
	return r
}

func peerName(a netip.Addr) string { return "edge" + strings.ReplaceAll(a.String(), ".", "_") }

func config(local netip.Addr, password string) Config {
	return Config{
		RouterID: local, ASN: edgeASN, NextHop: local, LocalAddress: local,
		HoldTime: 3 * time.Second, Keepalive: time.Second, ConnectRetry: time.Second,
		Peers: []Peer{{Address: routerAddr, ASN: routerASN, Password: password}},
	}
}

func speaker(t *testing.T, c Config) *Speaker {
	t.Helper()
	s := New(quiet())
	if err := s.Configure(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// A session with a TCP MD5 password comes up; an announced prefix
// reaches the router's kernel table with our next hop, and goes on
// withdrawal; WaitWithdrawn sees the withdrawal sent.
func TestAnnounceWithdrawMD5(t *testing.T) {
	r := router(t, "s3cret-md5", spkA)
	s := speaker(t, config(spkA, "s3cret-md5"))
	ctx := context.Background()
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)

	if err := s.Announce(ctx, []netip.Prefix{setPrefix, pulledOut}); err != nil {
		t.Fatal(err)
	}
	d := r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 5*time.Second)
	r.WaitNextHops(t, pulledOut, []netip.Addr{spkA}, 5*time.Second)
	t.Logf("route in the router's kernel table %v after the announcement", d)

	st := s.Status(ctx)
	if len(st.Sessions) != 1 || st.Sessions[0].State != "established" || st.Sessions[0].Advertised != 2 ||
		st.Sessions[0].Since.IsZero() || st.Sessions[0].ASN != routerASN {
		t.Fatalf("status sessions: %+v", st.Sessions)
	}
	if strings.Join(st.Advertised, ",") != "198.51.100.0/24,198.51.100.7/32" {
		t.Fatalf("status advertised: %v", st.Advertised)
	}

	// Declarative: the /32 alone stays.
	if err := s.Announce(ctx, []netip.Prefix{pulledOut}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitWithdrawn(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, nil, 3*time.Second)
	if got, _ := r.NextHops(pulledOut); len(got) != 1 {
		t.Fatalf("the /32 went too: %v", got)
	}
	start := time.Now()
	if err := s.WithdrawAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitWithdrawn(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	sent := time.Since(start)
	gone := r.WaitNextHops(t, pulledOut, nil, 3*time.Second)
	t.Logf("withdrawal sent after %v, route gone %v later", sent, gone)
	if st := s.Status(ctx); len(st.Advertised) != 0 || st.Sessions[0].Advertised != 0 {
		t.Fatalf("after WithdrawAll: %+v", st)
	}
}

// A wrong password keeps the session down.
func TestMD5Mismatch(t *testing.T) {
	r := router(t, "right", spkA)
	speaker(t, config(spkA, "wrong"))
	time.Sleep(4 * time.Second)
	if _, info, err := r.State(peerName(spkA)); err != nil || info == "Established" {
		t.Fatalf("session with a wrong MD5 password: %q %v", info, err)
	}
}

// Two speakers announcing the same prefix make one multipath route with
// both next hops; one withdraws and its next hop goes.
func TestECMP(t *testing.T) {
	r := router(t, "", spkA, spkB)
	a := speaker(t, config(spkA, ""))
	b := speaker(t, config(spkB, ""))
	ctx := context.Background()
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)
	r.WaitEstablished(t, peerName(spkB), 15*time.Second)
	for _, s := range []*Speaker{a, b} {
		if err := s.Announce(ctx, []netip.Prefix{setPrefix}); err != nil {
			t.Fatal(err)
		}
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA, spkB}, 5*time.Second)
	t.Logf("router:\n%s", r.IPRoute())
	if err := a.WithdrawAll(ctx); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkB}, 3*time.Second)
	// Stop closes the session (Cease): its routes go at once.
	b.Stop()
	r.WaitNextHops(t, setPrefix, nil, 3*time.Second)
}

// Adding and removing a peer leaves the established session alone; the
// speaker never listens.
func TestReconfigureKeepsSessions(t *testing.T) {
	r := router(t, "", spkA)
	c := config(spkA, "")
	s := speaker(t, c)
	ctx := context.Background()
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)
	if err := s.Announce(ctx, []netip.Prefix{setPrefix}); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 5*time.Second)
	since := s.Status(ctx).Sessions[0].Since

	c2 := c
	c2.Peers = append(c2.Peers, Peer{Address: netip.MustParseAddr("192.0.2.99"), ASN: 64513})
	if err := s.Configure(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(ctx); len(st.Sessions) != 2 {
		t.Fatalf("sessions after adding a peer: %+v", st.Sessions)
	}
	if err := s.Configure(ctx, c); err != nil {
		t.Fatal(err)
	}
	st := s.Status(ctx)
	if len(st.Sessions) != 1 || st.Sessions[0].State != "established" || !st.Sessions[0].Since.Equal(since) {
		t.Fatalf("session changed by reconfiguring another peer: %+v (was up since %v)", st.Sessions, since)
	}
	if got, _ := r.NextHops(setPrefix); len(got) != 1 {
		t.Fatalf("route lost while reconfiguring: %v", got)
	}
	if l := listeners(t); len(l) > 0 {
		t.Fatalf("TCP sockets listening in the speaker's namespace: %v", l)
	}
}

// listeners lists the listening TCP sockets of the process's namespace.
func listeners(t *testing.T) []string {
	var out []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) > 3 && fs[3] == "0A" { // TCP_LISTEN
				out = append(out, fs[1])
			}
		}
	}
	return out
}

// A speaker that stops answering (process frozen: no FIN, no keepalive)
// loses its routes when the router's hold timer expires; a killed one
// (the kernel closes its socket) loses them at once.
func TestHoldTimerAndKill(t *testing.T) {
	r := router(t, "", spkChild)
	const hold = 3 * time.Second

	child := startHelper(t, config(spkChild, ""), []netip.Prefix{setPrefix})
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkChild}, 15*time.Second)
	// Right after a keepalive went out, so the whole hold time remains
	// at most one keepalive interval (1 s) short.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	d := r.WaitNextHops(t, setPrefix, nil, hold+3*time.Second)
	t.Logf("frozen speaker: route gone after %v (hold time %v)", d, hold)
	if d < hold-time.Second-200*time.Millisecond {
		t.Fatalf("route gone after %v: before the hold timer (%v) could expire", d, hold)
	}
	child.Process.Kill()
	child.Wait()

	child = startHelper(t, config(spkChild, ""), []netip.Prefix{setPrefix})
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkChild}, 15*time.Second)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	d = r.WaitNextHops(t, setPrefix, nil, hold+3*time.Second)
	t.Logf("killed speaker: route gone after %v", d)
	if d > time.Second {
		t.Errorf("killed speaker: route gone after %v, want the TCP close to end the session at once", d)
	}
}

const helperEnv = "AZGT_BGP_HELPER"

type helperConfig struct {
	Config   Config
	Prefixes []netip.Prefix
}

// startHelper runs a speaker in a child process (this test binary): the
// test can freeze or kill it like a real edge.
func startHelper(t *testing.T, c Config, prefixes []netip.Prefix) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(helperConfig{c, prefixes})
	self, _ := os.Executable()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "announced\n" {
		t.Fatalf("helper speaker: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd
}

func helperSpeaker(env string) {
	var hc helperConfig
	if err := json.Unmarshal([]byte(env), &hc); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	s := New(quiet())
	ctx := context.Background()
	if err := s.Configure(ctx, hc.Config); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	if err := s.Announce(ctx, hc.Prefixes); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	fmt.Println("announced")
	select {}
}

func TestValidate(t *testing.T) {
	ok := config(spkA, "")
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"ok", func(*Config) {}, ""},
		{"router id", func(c *Config) { c.RouterID = netip.Addr{} }, "router_id"},
		{"asn", func(c *Config) { c.ASN = 0 }, "asn"},
		{"next hop v6", func(c *Config) { c.NextHop = netip.MustParseAddr("2001:db8::1") }, "next_hop"},
		{"next hop6", func(c *Config) { c.NextHop6 = netip.MustParseAddr("2001:db8:ff::2") }, ""},
		{"next hop6 v4", func(c *Config) { c.NextHop6 = netip.MustParseAddr("192.0.2.9") }, "next_hop6"},
		{"next hop6 mapped", func(c *Config) { c.NextHop6 = netip.MustParseAddr("::ffff:192.0.2.9") }, "next_hop6"},
		{"next hop6 link-local", func(c *Config) { c.NextHop6 = netip.MustParseAddr("fe80::1") }, "next_hop6"},
		{"peer v6", func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("2001:db8:ff::1") }, ""},
		{"peer link-local", func(c *Config) { c.Peers[0].Address = netip.MustParseAddr("fe80::1") }, "peers[0].address"},
		{"local address6 v4", func(c *Config) { c.LocalAddress6 = netip.MustParseAddr("192.0.2.9") }, "local address6"},
		{"hold short", func(c *Config) { c.HoldTime = 2 * time.Second }, "hold_time"},
		{"hold fraction", func(c *Config) { c.HoldTime = 3500 * time.Millisecond }, "hold_time"},
		{"keepalive >= hold", func(c *Config) { c.Keepalive = 3 * time.Second }, "keepalive"},
		{"peer asn", func(c *Config) { c.Peers[0].ASN = 0 }, "peers[0]"},
		{"peer twice", func(c *Config) { c.Peers = append(c.Peers, c.Peers[0]) }, "listed twice"},
		{"password long", func(c *Config) { c.Peers[0].Password = strings.Repeat("x", 81) }, "password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Peers = append([]Peer(nil), ok.Peers...)
			tc.edit(&c)
			err := c.Validate()
			if tc.field == "" && err != nil || tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)) {
				t.Fatalf("Validate: %v, want an error naming %q", err, tc.field)
			}
		})
	}
	if err := New(quiet()).Announce(context.Background(), []netip.Prefix{netip.MustParsePrefix("::ffff:198.51.100.0/120")}); err == nil {
		t.Fatal("an IPv4-mapped prefix was accepted")
	}
}

// A stopped speaker (the edge lost its BGP settings) can be configured
// again: its sessions and routes come back.
func TestStopThenConfigure(t *testing.T) {
	r := router(t, "", spkA)
	c := config(spkA, "")
	s := speaker(t, c)
	ctx := context.Background()
	if err := s.Announce(ctx, []netip.Prefix{setPrefix}); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 15*time.Second)
	s.Stop()
	r.WaitNextHops(t, setPrefix, nil, 3*time.Second)
	if st := s.Status(ctx); len(st.Sessions) != 0 || len(st.Advertised) != 0 {
		t.Fatalf("status of a stopped speaker: %+v", st)
	}
	if err := s.Configure(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Announce is declarative and remembered: the routes come back.
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 15*time.Second)
	// A new router ID restarts the sessions, routes included.
	c.RouterID = netip.MustParseAddr("192.0.2.22")
	if err := s.Configure(ctx, c); err != nil {
		t.Fatal(err)
	}
	r.WaitNextHops(t, setPrefix, []netip.Addr{spkA}, 15*time.Second)
	if st := s.Status(ctx); st.RouterID != "192.0.2.22" {
		t.Fatalf("router ID after reconfiguring: %+v", st)
	}
}

// Routes the router sends are counted as received but never enter the
// speaker's RIB, so they are never advertised (the edge is no transit),
// whatever the router sends: its own routes, a covering one, one equal to
// the edge's own prefix.
func TestRejectsLearntRoutes(t *testing.T) {
	r := birdtest.New(t, "r")
	r.Link(t, "up0", "azgtbgp0", netip.PrefixFrom(routerAddr, 24), netip.PrefixFrom(spkA, 24))
	learnt := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15"), setPrefix,
		netip.MustParsePrefix("0.0.0.0/0")}
	r.Start(t, birdtest.Config{ASN: routerASN, RouterID: routerAddr, HoldTime: 3, Export: learnt,
		Peers: []birdtest.Peer{{Name: peerName(spkA), Address: spkA, ASN: edgeASN}}})
	s := speaker(t, config(spkA, ""))
	ctx := context.Background()
	r.WaitEstablished(t, peerName(spkA), 15*time.Second)
	if err := s.Announce(ctx, []netip.Prefix{pulledOut}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := s.Status(ctx)
		if len(st.Sessions) == 1 && st.Sessions[0].Received >= uint64(len(learnt)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router's %d routes never arrived: %+v", len(learnt), st.Sessions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.WaitNextHops(t, pulledOut, []netip.Addr{spkA}, 5*time.Second)
	var rib []string
	if err := s.srv.ListPath(ctx, &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: v4unicast},
		func(d *api.Destination) { rib = append(rib, d.GetPrefix()) }); err != nil {
		t.Fatal(err)
	}
	if len(rib) != 1 || rib[0] != pulledOut.String() {
		t.Fatalf("global RIB %v: want only our %v (learnt routes must be rejected)", rib, pulledOut)
	}
	if st := s.Status(ctx); st.Sessions[0].Advertised != 1 {
		t.Fatalf("advertised %d routes to the router, want 1: %+v", st.Sessions[0].Advertised, st.Sessions)
	}
}

// A peer GoBGP refused is not taken as configured: the next Configure
// with the same configuration tries it again (and says so if it fails
// again) instead of returning nil without the session.
func TestConfigureRetriesRefusedPeer(t *testing.T) {
	birdtest.Self(t)
	ctx := context.Background()
	c := config(spkA, "")
	s := speaker(t, c)
	other := netip.MustParseAddr("192.0.2.99")
	// GoBGP refuses a second peer of one address: have it hold one we did
	// not configure, so that adding ours fails.
	if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(s.cfg, Peer{Address: other, ASN: 64513, Port: 179})}); err != nil {
		t.Fatal(err)
	}
	c2 := c
	c2.Peers = append(slices.Clone(c.Peers), Peer{Address: other, ASN: 64514})
	if err := s.Configure(ctx, c2); err == nil {
		t.Fatal("Configure: GoBGP refused the peer, no error")
	}
	if err := s.Configure(ctx, c2); err == nil {
		t.Fatal("Configure again: the refused peer was taken as configured (no retry, no error)")
	}
	if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: other.String()}); err != nil {
		t.Fatal(err)
	}
	if err := s.Configure(ctx, c2); err != nil {
		t.Fatalf("Configure once GoBGP accepts the peer: %v", err)
	}
	var asn uint32
	s.srv.ListPeer(ctx, &api.ListPeerRequest{Address: other.String()}, func(p *api.Peer) { asn = p.GetConf().GetPeerAsn() })
	if asn != 64514 {
		t.Fatalf("peer %v has AS %d, want ours (64514)", other, asn)
	}
}
