package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/dataplane/dptest"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/placement/placementtest"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// t0 is the drain tests' fake wall clock at the start (never compared
// with the kernel's).
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock is a Config.Now the test moves by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// fakeTimers records the drain timers a reconciler arms instead of
// arming them: the test fires them by hand.
type fakeTimers struct {
	armed []*fakeTimer
}

type fakeTimer struct {
	after   time.Duration
	fire    func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { was := !t.stopped; t.stopped = true; return was }

// expire is the timer going off: no longer pending, its callback run.
func (t *fakeTimer) expire() { t.stopped = true; t.fire() }

func (f *fakeTimers) afterFunc(d time.Duration, fn func()) stopper {
	t := &fakeTimer{after: d, fire: fn}
	f.armed = append(f.armed, t)
	return t
}

// pending is the one timer armed and not stopped (nil: none).
func (f *fakeTimers) pending(t *testing.T) *fakeTimer {
	t.Helper()
	var p *fakeTimer
	for _, x := range f.armed {
		if !x.stopped {
			if p != nil {
				t.Fatalf("two drain timers pending: %+v and %+v", p, x)
			}
			p = x
		}
	}
	return p
}

// drainReconciler is a reconciler of az1-h1 on fake maps with a fake
// clock and fake timers.
func drainReconciler(t *testing.T, maps dataplane.AgentMaps, clock *fakeClock, log *slog.Logger) (*Reconciler, *fakeTimers) {
	t.Helper()
	if log == nil {
		log = quiet
	}
	r, err := NewReconciler(Config{NoRetry: true, Name: "az1-h1", Underlay: "ul0", Log: log, Now: clock.Now}, maps, newFakeLinks())
	if err != nil {
		t.Fatal(err)
	}
	timers := &fakeTimers{}
	r.afterFunc = timers.afterFunc
	return r, timers
}

// moved is eip bound to host/guest, moved there from az1-h1's guest
// prev (underlay and VSID as the controller's bind sets them), draining
// until until.
func moved(addr, host, guest, prev string, vsid uint32, until time.Time) *model.EIP {
	return &model.EIP{Address: a(addr), Binding: &model.Binding{Host: host, Guest: guest},
		Previous: &model.PreviousBinding{Host: "az1-h1", Guest: prev, Underlay: a("198.18.11.1"), VSID: vsid, Until: until}}
}

// freeH2 frees az1-h2's guest g1 of state's EIP 198.51.100.8 and gives
// az1-h2 a guest g2: room to move EIPs there.
func freeH2(t *testing.T, st *model.State) *model.State {
	t.Helper()
	put(t, st, &model.EIP{Address: a("198.51.100.8")})
	h2 := *st.Hosts["az1-h2"]
	h2.Guests = append(append([]model.Guest(nil), h2.Guests...), model.Guest{Name: "g2", Address: a("198.19.12.3"), VSID: 5122})
	put(t, st, &h2)
	return st
}

// putValid puts o into st through the model's validation (what the agent
// reads from the store has passed it).
func putValid(t *testing.T, st *model.State, o model.Object) {
	t.Helper()
	if es := o.Validate(); len(es) != 0 {
		t.Fatalf("%v: %v", o, es)
	}
	put(t, st, o)
}

// An EIP of each family moved from az1-h1/g1 to az1-h2 stays programmed
// on az1-h1 as it was (the same entry, counter slot and all: no write)
// while its previous binding is active; the drain timer is armed for the
// end; fired early (a wall clock slewed) it changes nothing and arms
// the rest; fired at the end, both entries go, as an unbind would, and
// their counter slots are freed; no timer is left.
func TestAgentDrain(t *testing.T) {
	st := freeH2(t, state6(t))
	clock := &fakeClock{now: t0}
	fake := dataplane.NewFakeAgent()
	rec := &recordingAgent{FakeAgent: fake, writes: map[netip.Addr][]uint16{}}
	r, timers := drainReconciler(t, rec, clock, nil)
	r.Handle(st, 3, nil, true)
	v4, v6 := a("198.51.100.7"), a("2001:db8:a::7")
	before := fake.EIPMap
	before = map[netip.Addr]dataplane.AgentEIP{v4: before[v4], v6: before[v6]}
	if before[v4].Private != a("198.19.11.1") || before[v6].Private != a("2001:db8:11::1") {
		t.Fatalf("bound: %+v", fake.EIPMap)
	}
	if p := timers.pending(t); p != nil {
		t.Fatalf("a drain timer with no drain: %+v", p)
	}
	writes := len(rec.writes[v4]) + len(rec.writes[v6])

	until := t0.Add(10 * time.Second)
	putValid(t, st, moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, until))
	putValid(t, st, moved("2001:db8:a::7", "az1-h2", "g1", "g1", 5111, until))
	clock.now = t0.Add(time.Second)
	r.Handle(st, 4, nil, false)
	if len(r.errs) != 0 {
		t.Fatalf("errors %v", r.errs)
	}
	checkFamilies(t, fake)
	for _, x := range []netip.Addr{v4, v6} {
		if got := fake.EIPMap[x]; got != before[x] {
			t.Fatalf("draining %v: %+v, was %+v", x, got, before[x])
		}
	}
	if n := len(rec.writes[v4]) + len(rec.writes[v6]); n != writes {
		t.Fatalf("the drain wrote the EIPs again: %v", rec.writes)
	}
	if s := r.Status(t0, nil); s.Routes != 2 || len(s.EIPs) != 2 || s.Draining != 2 {
		t.Fatalf("status while draining: routes %d EIPs %v draining %d", s.Routes, s.EIPs, s.Draining)
	}
	p := timers.pending(t)
	if p == nil || p.after != 9*time.Second {
		t.Fatalf("drain timer %+v, want one in 9s (until %v, now %v)", p, until, clock.now)
	}
	// The other host's agent holds the live binding meanwhile.
	fake2 := dataplane.NewFakeAgent()
	r2, _ := NewReconciler(Config{NoRetry: true, Name: "az1-h2", Underlay: "ul0", Log: quiet, Now: clock.Now}, fake2, newFakeLinks())
	r2.Handle(st, 4, nil, true)
	if e := fake2.EIPMap[v4]; e.Private != a("198.19.12.1") || fake2.EIPMap[v6].Private != a("2001:db8:12::1") {
		t.Fatalf("az1-h2: %+v", fake2.EIPMap)
	}

	clock.now = until.Add(-time.Millisecond)
	p.expire()
	if len(fake.EIPMap) != 2 {
		t.Fatalf("a timer fired early removed the drain: %v", fake.EIPMap)
	}
	p2 := timers.pending(t)
	if p2 == nil || p2 == p || p2.after != time.Millisecond {
		t.Fatalf("after an early fire: %+v, want a new timer in 1ms", p2)
	}
	p.fire() // the fired timer's callback again (a late duplicate): nothing
	if timers.pending(t) != p2 {
		t.Fatal("a stale timer callback replaced the pending timer")
	}

	clock.now = until
	p2.expire()
	if len(fake.EIPMap) != 0 {
		t.Fatalf("after the drain's end: %v", fake.EIPMap)
	}
	if p := timers.pending(t); p != nil {
		t.Fatalf("a drain timer left after the last drain: %+v", p)
	}
	if err := checkCounterSlots(r); err != nil {
		t.Fatal(err)
	}
	if len(r.free) != 2 {
		t.Fatalf("free counter slots %v, want the drains' two", r.free)
	}
	if s := r.Status(t0, nil); s.Routes != 0 || s.Draining != 0 {
		t.Fatalf("status routes %d draining %d after the drain", s.Routes, s.Draining)
	}
	// The controller's write that clears Previous: nothing changes.
	put(t, st, &model.EIP{Address: v4, Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}})
	r.Handle(st, 5, nil, false)
	if len(fake.EIPMap) != 0 || len(r.errs) != 0 || timers.pending(t) != nil {
		t.Fatalf("after the clearing write: %v %v", fake.EIPMap, r.errs)
	}
}

// A state read after the drain's end (the clearing write late) programs
// nothing and arms no timer; Stop stops a pending drain timer.
func TestAgentDrainEndedOrStopped(t *testing.T) {
	st := freeH2(t, state(t))
	putValid(t, st, moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, t0))
	clock := &fakeClock{now: t0}
	var logged bytes.Buffer
	fake := dataplane.NewFakeAgent()
	r, timers := drainReconciler(t, fake, clock, slog.New(slog.NewTextHandler(&logged, nil)))
	r.Handle(st, 3, nil, true)
	if len(fake.EIPMap) != 0 || timers.pending(t) != nil {
		t.Fatalf("an ended drain: %v, timer %+v", fake.EIPMap, timers.pending(t))
	}
	if strings.Contains(logged.String(), "drained on its previous guest") {
		t.Fatalf("an ended drain logged as draining:\n%s", logged.String())
	}
	clock.now = t0.Add(-time.Second)
	r.Handle(st, 4, nil, false)
	p := timers.pending(t)
	if len(fake.EIPMap) != 1 || p == nil || p.after != time.Second {
		t.Fatalf("active drain: %v, timer %+v", fake.EIPMap, p)
	}
	if n := strings.Count(logged.String(), "drained on its previous guest"); n != 1 {
		t.Fatalf("the active drain logged %d times:\n%s", n, logged.String())
	}
	r.Stop()
	if !p.stopped {
		t.Fatal("Stop left the drain timer pending")
	}
	clock.now = t0
	p.fire() // a callback already on its way when Stop ran
	if len(fake.EIPMap) != 1 {
		t.Fatalf("a stopped reconciler wrote the maps: %v", fake.EIPMap)
	}
}

// nextDrainEnd is the earliest Until after now among the drains (an
// Until equal to now has ended).
func TestNextDrainEnd(t *testing.T) {
	w := HostWant{Drains: map[netip.Addr]Want{
		a("198.51.100.1"):  {Until: t0.Add(3 * time.Second)},
		a("198.51.100.2"):  {Until: t0.Add(time.Second)},
		a("2001:db8:a::1"): {Until: t0.Add(5 * time.Second)},
	}}
	for _, c := range []struct {
		now  time.Duration
		want time.Duration // -1: none
	}{
		{-time.Hour, time.Second}, {0, time.Second}, {time.Second, 3 * time.Second}, {2 * time.Second, 3 * time.Second},
		{3 * time.Second, 5 * time.Second}, {5 * time.Second, -1}, {time.Hour, -1},
	} {
		at, ok := nextDrainEnd(w, t0.Add(c.now))
		if c.want < 0 {
			if ok {
				t.Errorf("now +%v: %v, want none", c.now, at)
			}
			continue
		}
		if !ok || !at.Equal(t0.Add(c.want)) {
			t.Errorf("now +%v: %v %v, want %v", c.now, at, ok, t0.Add(c.want))
		}
	}
	if _, ok := nextDrainEnd(HostWant{}, t0); ok {
		t.Error("no drain: an end")
	}
}

// What Desired makes of EIP copies in az1-h1's scope that are bound
// elsewhere.
func TestDesiredDrains(t *testing.T) {
	until := t0.Add(10 * time.Second)
	for _, c := range []struct {
		name    string
		eips    []*model.EIP
		drains  map[string]string // EIP -> private address
		eips1   []string          // az1-h1's live EIPs
		skipped string            // in DrainsSkipped ("": none)
	}{
		{name: "IPv4 drain beside the guest's live IPv6 EIP", eips: []*model.EIP{moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, until)},
			drains: map[string]string{"198.51.100.7": "198.19.11.1"}, eips1: []string{"2001:db8:a::7"}},
		{name: "IPv6 drain beside the guest's live IPv4 EIP", eips: []*model.EIP{moved("2001:db8:a::7", "az1-h2", "g1", "g1", 5111, until)},
			drains: map[string]string{"2001:db8:a::7": "2001:db8:11::1"}, eips1: []string{"198.51.100.7"}},
		{name: "a live binding of the family wins",
			eips: []*model.EIP{moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, until),
				{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}}},
			eips1: []string{"198.51.100.9", "2001:db8:a::7"}, skipped: "EIP 198.51.100.7: not drained on guest g1: the guest holds EIP 198.51.100.9 (a live binding wins)"},
		{name: "the latest move wins",
			eips: []*model.EIP{moved("198.51.100.7", "az1-h2", "g1", "g2", 5112, until),
				moved("198.51.100.9", "az1-h2", "g2", "g2", 5112, until.Add(time.Second))},
			drains: map[string]string{"198.51.100.9": "198.19.11.3"}, eips1: []string{"2001:db8:a::7"},
			skipped: "EIP 198.51.100.7: not drained on guest g2: EIP 198.51.100.9 moved from it later and drains there"},
		{name: "previous guest gone", eips: []*model.EIP{moved("198.51.100.7", "az1-h2", "g1", "g9", 5111, until)},
			eips1: []string{"2001:db8:a::7"}, skipped: "EIP 198.51.100.7: not drained: its previous guest g9 is not on this host"},
		{name: "previous guest of another VSID now (re-created)", eips: []*model.EIP{moved("198.51.100.7", "az1-h2", "g1", "g1", 5999, until)},
			eips1: []string{"2001:db8:a::7"}, skipped: "EIP 198.51.100.7: not drained: its previous guest g1 has VSID 5111 now, 5999 at the move"},
		{name: "previous guest without address6", eips: []*model.EIP{moved("2001:db8:a::7", "az1-h2", "g1", "g2", 5112, until)},
			eips1: []string{"198.51.100.7"}, skipped: "EIP 2001:db8:a::7: not drained: its previous guest g2 has no IPv6 address (address6)"},
		{name: "previous binding on another host", eips1: []string{"2001:db8:a::7"},
			eips: []*model.EIP{{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h2", Guest: "g1"},
				Previous: &model.PreviousBinding{Host: "az1-h3", Guest: "g1", Underlay: a("198.18.13.1"), VSID: 5131, Until: until}}}},
		{name: "bound elsewhere without previous", eips1: []string{"2001:db8:a::7"},
			eips: []*model.EIP{{Address: a("198.51.100.7"), Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := freeH2(t, state6(t))
			for _, e := range c.eips {
				putValid(t, st, e)
			}
			w, err := Desired(st, "az1-h1")
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Drains) != len(c.drains) {
				t.Fatalf("drains %+v, want %v", w.Drains, c.drains)
			}
			for addr, private := range c.drains {
				d, ok := w.Drains[a(addr)]
				e := st.EIPs[addr]
				if !ok || d.Private != a(private) || !d.Until.Equal(e.Previous.Until) || d.Guest != e.Previous.Guest ||
					d.Set != "pop-a" || d.Covering != "pop-a" || d.VSID != e.Previous.VSID {
					t.Fatalf("drain %s: %+v", addr, d)
				}
			}
			var live []string
			for _, x := range sortedAddrs(w.EIPs) {
				live = append(live, x.String())
			}
			if strings.Join(live, " ") != strings.Join(c.eips1, " ") {
				t.Fatalf("live EIPs %v, want %v", live, c.eips1)
			}
			if got := strings.Join(w.DrainsSkipped, "\n"); got != c.skipped {
				t.Fatalf("skipped %q, want %q", got, c.skipped)
			}
			if len(w.Problems) != 0 {
				t.Fatalf("problems %v", w.Problems)
			}
		})
	}
}

// A guest draining an EIP that takes a live EIP of the same family: the
// live one wins at once (the drain's entry goes, the live one is
// written), said once in the log however often the state is read.
func TestAgentDrainLiveWins(t *testing.T) {
	st := freeH2(t, state(t))
	clock := &fakeClock{now: t0}
	var logged bytes.Buffer
	fake := dataplane.NewFakeAgent()
	r, _ := drainReconciler(t, fake, clock, slog.New(slog.NewTextHandler(&logged, nil)))
	putValid(t, st, moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, t0.Add(10*time.Second)))
	r.Handle(st, 3, nil, true)
	if e := fake.EIPMap[a("198.51.100.7")]; e.Private != a("198.19.11.1") {
		t.Fatalf("drain: %+v", fake.EIPMap)
	}
	putValid(t, st, &model.EIP{Address: a("198.51.100.9"), Binding: &model.Binding{Host: "az1-h1", Guest: "g1"}})
	for rev := int64(4); rev < 7; rev++ {
		r.Handle(st, rev, nil, false)
	}
	if _, ok := fake.EIPMap[a("198.51.100.7")]; ok || fake.EIPMap[a("198.51.100.9")].Private != a("198.19.11.1") || len(fake.EIPMap) != 1 {
		t.Fatalf("live EIP beside the drain: %+v", fake.EIPMap)
	}
	if n := strings.Count(logged.String(), "a live binding wins"); n != 1 {
		t.Fatalf("the skipped drain logged %d times:\n%s", n, logged.String())
	}
	if n := strings.Count(logged.String(), "drained on its previous guest here"); n != 1 {
		t.Fatalf("the drain logged %d times:\n%s", n, logged.String())
	}
}

// TestAgentDrainDataPlane: the drain on the real agent data plane
// (BPF_PROG_TEST_RUN). While the EIP, moved from the bed's guest to
// another host, drains here, an edge's NVGRE for it comes out to the
// guest and the guest's reply comes out to the edge byte for byte as
// they did while it was bound here (the translation of the guest's
// address, its SNAT); at the drain's end (the timer, fake clock) both
// are dropped under their counters: drop_unknown, and drop_no_eip
// (IPv4) or drop_local (IPv6: a guest's IPv6 without an IPv6 EIP).
func TestAgentDrainDataPlane(t *testing.T) { drainDataPlane(t, false) }

// TestAgentDrainDataPlaneIPv6 is its IPv6 twin (NAT66).
func TestAgentDrainDataPlaneIPv6(t *testing.T) { drainDataPlane(t, true) }

func drainDataPlane(t *testing.T, v6 bool) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (BPF, network namespaces)")
	}
	env, err := dptest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	dp, err := dataplane.LoadAgent(dataplane.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	g1, err := env.Node.Ifindex(dptest.GuestDev)
	if err != nil {
		t.Fatal(err)
	}
	const vsid, guest6 = 5000, "2001:db8:f0::5"
	eip, private, client, noEIP := a("198.51.100.7"), a(dptest.GuestAddr), a("203.0.113.50"), "drop_no_eip"
	if v6 {
		if err := env.GuestIPv6(guest6, "2001:db8:f0::/64"); err != nil {
			t.Fatal(err)
		}
		eip, private, client, noEIP = a("2001:db8:e1::7"), a(guest6), a("2001:db8:c1::50"), "drop_local"
	}
	st := model.NewState()
	for _, o := range []model.Object{
		&model.AZ{Name: "az1"},
		&model.Host{Name: "h1", AZ: "az1", Underlay: a(dptest.UlAddr), Guests: []model.Guest{
			{Name: "g1", Address: a(dptest.GuestAddr), Address6: a(guest6), VSID: vsid}}},
		&model.Host{Name: "h2", AZ: "az1", Underlay: a("198.18.12.1"), Guests: []model.Guest{
			{Name: "g1", Address: a("198.19.12.1"), Address6: a("2001:db8:f2::1"), VSID: 5121}}},
		&model.EdgeSet{Name: "pop", Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:e1::/48")},
			Edges: []model.EdgeNode{{Name: "e1", Underlay: a("198.18.1.1")}}},
		&model.EIP{Address: eip, Binding: &model.Binding{Host: "h1", Guest: "g1"}},
	} {
		putValid(t, st, o)
	}
	clock := &fakeClock{now: t0}
	r, err := NewReconciler(Config{NoRetry: true, Name: "h1", Underlay: dptest.UlDev, Log: quiet, Now: clock.Now}, dp, bedLinks{ifindex: g1, env: env, dp: dp})
	if err != nil {
		t.Fatal(err)
	}
	timers := &fakeTimers{}
	r.afterFunc = timers.afterFunc

	// ip is a UDP packet from src:sport to dst:dport of the family.
	ip := func(src, dst netip.Addr, sport, dport uint16, ttl uint8) []byte {
		udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
		var l3 gopacket.SerializableLayer
		if v6 {
			h := &layers.IPv6{Version: 6, HopLimit: ttl, NextHeader: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
			udp.SetNetworkLayerForChecksum(h)
			l3 = h
		} else {
			h := &layers.IPv4{Version: 4, IHL: 5, TTL: ttl, Id: 7, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
			udp.SetNetworkLayerForChecksum(h)
			l3 = h
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, l3, udp, gopacket.Payload("drain")); err != nil {
			t.Fatal(err)
		}
		return append([]byte(nil), buf.Bytes()...)
	}
	// eth puts a packet behind an Ethernet header (without the padding to
	// 60 bytes gopacket's Ethernet layer adds).
	eth := func(src, dst string, ip []byte) []byte {
		ty := []byte{0x08, 0x00}
		if ip[0]>>4 == 6 {
			ty = []byte{0x86, 0xdd}
		}
		return append(append(append(append([]byte(nil), dptest.MustMAC(dst)...), dptest.MustMAC(src)...), ty...), ip...)
	}
	outer := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolGRE,
		SrcIP: net.ParseIP("198.18.1.1").To4(), DstIP: net.ParseIP(dptest.UlAddr).To4()}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: dptest.MustMAC(dptest.FabMAC), DstMAC: dptest.MustMAC(dptest.UlMAC), EthernetType: layers.EthernetTypeIPv4}, outer,
		&layers.GRE{KeyPresent: true, Protocol: layers.EthernetTypeTransparentEthernetBridging, Key: vsid<<8 | 0x33},
		gopacket.Payload(eth("02:00:00:00:00:fe", "02:00:c6:33:64:07", ip(client, eip, 1000, 53, 63)))); err != nil {
		t.Fatal(err)
	}
	// An edge's NVGRE for the EIP, the guest's frame it becomes, and a
	// reply of the guest.
	fromEdge := append([]byte(nil), buf.Bytes()...)
	toGuest := eth(dptest.GuestMAC, dptest.VMMAC, ip(client, private, 1000, 53, 63))
	reply := eth(dptest.VMMAC, dptest.GuestMAC, ip(private, client, 53, 1000, 64))

	const xdpDrop, xdpRedirect = 1, 4
	counter := func(name string) uint64 {
		t.Helper()
		c, err := dp.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return c[name].Packets
	}
	// run sends frame through prog and returns its output, checking the
	// action (and, for a drop, the counter that must count it).
	run := func(what string, prog *ebpf.Program, dev string, frame []byte, action uint32, drop string) []byte {
		t.Helper()
		var before uint64
		if drop != "" {
			before = counter(drop)
		}
		res, err := env.Run(prog, dev, frame)
		if err != nil {
			t.Fatal(err)
		}
		if res.Action != action {
			c, _ := dp.Stats()
			t.Fatalf("%s: XDP action %d, want %d (counters %v)", what, res.Action, action, nonZero(c))
		}
		if drop != "" && counter(drop) != before+1 {
			t.Fatalf("%s: dropped, but not counted in %s", what, drop)
		}
		return append([]byte(nil), res.Out...)
	}

	r.Handle(st, 1, nil, true)
	if errs := r.Status(t0, nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	if got := run("bound: from the edge", dp.UnderlayProgram(), dptest.UlDev, fromEdge, xdpRedirect, ""); !bytes.Equal(got, toGuest) {
		t.Fatalf("bound: to the guest\n got %x\nwant %x", got, toGuest)
	}
	boundReply := run("bound: the guest's reply", dp.GuestProgram(), dptest.GuestDev, reply, xdpRedirect, "")
	p := gopacket.NewPacket(boundReply, layers.LayerTypeEthernet, gopacket.Default)
	if o, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); o == nil || o.Protocol != layers.IPProtocolGRE || o.DstIP.String() != "198.18.1.1" ||
		!bytes.Contains(boundReply, eip.AsSlice()) || bytes.Contains(boundReply, private.AsSlice()) {
		t.Fatalf("bound: the guest's reply is not NVGRE to the edge from the EIP: %v", p)
	}

	// Moved to h2: drained here for 10 s.
	putValid(t, st, &model.EIP{Address: eip, Binding: &model.Binding{Host: "h2", Guest: "g1"},
		Previous: &model.PreviousBinding{Host: "h1", Guest: "g1", Underlay: a(dptest.UlAddr), VSID: vsid, Until: t0.Add(10 * time.Second)}})
	clock.now = t0.Add(time.Second)
	r.Handle(st, 2, nil, false)
	if errs := r.Status(t0, nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	if got := run("draining: from the edge", dp.UnderlayProgram(), dptest.UlDev, fromEdge, xdpRedirect, ""); !bytes.Equal(got, toGuest) {
		t.Fatalf("draining: to the guest\n got %x\nwant %x", got, toGuest)
	}
	if got := run("draining: the guest's reply", dp.GuestProgram(), dptest.GuestDev, reply, xdpRedirect, ""); !bytes.Equal(got, boundReply) {
		t.Fatalf("draining: the guest's reply\n got %x\nwant %x (bound)", got, boundReply)
	}

	// The drain's end: the timer re-plans, the EIP goes.
	tm := timers.pending(t)
	if tm == nil || tm.after != 9*time.Second {
		t.Fatalf("drain timer %+v, want one in 9s", tm)
	}
	clock.now = t0.Add(10 * time.Second)
	tm.expire()
	if errs := r.Status(t0, nil).Errors; len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	if es, err := dp.EIPs(); err != nil || len(es) != 0 {
		t.Fatalf("after the drain: EIPs %v %v", es, err)
	}
	run("drained: from the edge", dp.UnderlayProgram(), dptest.UlDev, fromEdge, xdpDrop, "drop_unknown")
	run("drained: the guest's reply", dp.GuestProgram(), dptest.GuestDev, reply, xdpDrop, noEIP)
}

// TestAgentDrainThroughStore: through a real store and the placement, the
// moved EIP's copy reaches the old host's agent, which drains it; the
// controller's write that clears Previous takes the copy out of the old
// host's scope, and the agent removes the drain before its Until; a copy
// whose Previous fails the model's validation (a multicast underlay,
// written straight into etcd) is not programmed and is listed in the
// status.
func TestAgentDrainThroughStore(t *testing.T) {
	s := embeddedtest.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := freeH2(t, state(t))
	var objs []model.Object
	for _, k := range model.Kinds {
		for _, key := range st.Keys(k) {
			o, _ := st.Get(k, key)
			objs = append(objs, o)
		}
	}
	if _, err := placementtest.Put(ctx, s, objs...); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: t0}
	fake := dataplane.NewFakeAgent()
	r, timers := drainReconciler(t, fake, clock, nil)
	type step struct {
		rev int64
		ack chan struct{}
	}
	steps := make(chan step)
	go s.FollowScopeState(ctx, placement.AgentScope("az1-h1"), func(st *model.State, rev int64, evs []store.Event, resync bool) {
		r.Handle(st, rev, evs, resync)
		ack := make(chan struct{})
		select {
		case steps <- step{rev, ack}:
			<-ack
		case <-ctx.Done():
		}
	})
	// at runs check once the agent handled revision rev (the maps are
	// not written meanwhile).
	at := func(rev int64, check func()) {
		t.Helper()
		for {
			select {
			case s := <-steps:
				if s.rev >= rev {
					check()
					close(s.ack)
					return
				}
				close(s.ack)
			case <-time.After(30 * time.Second):
				t.Fatalf("revision %d not handled in 30s", rev)
			}
		}
	}
	v4 := a("198.51.100.7")
	var slot uint32
	rev, err := placementtest.Put(ctx, s, &model.EIP{Address: a("198.51.100.9")}) // a revision to wait for
	if err != nil {
		t.Fatal(err)
	}
	at(rev, func() {
		if e, ok := fake.EIPMap[v4]; !ok || e.Private != a("198.19.11.1") {
			t.Errorf("bound: %v", fake.EIPMap)
		}
		slot = fake.EIPMap[v4].StatsIdx
	})
	if rev, err = placementtest.Put(ctx, s, moved("198.51.100.7", "az1-h2", "g1", "g1", 5111, t0.Add(10*time.Second))); err != nil {
		t.Fatal(err)
	}
	clock.now = t0.Add(time.Second)
	at(rev, func() {
		if e, ok := fake.EIPMap[v4]; !ok || e.Private != a("198.19.11.1") || e.StatsIdx != slot {
			t.Errorf("draining: %v", fake.EIPMap)
		}
		if timers.pending(t) == nil {
			t.Error("no drain timer")
		}
	})
	// Straight into etcd at the primary key and the copy in az1-h1's
	// scope (no commit marker: checked with the next write's revision):
	// an EIP moved from g2 whose previous underlay is a multicast
	// address (all else would drain it).
	bad := `{"address":"198.51.100.9","binding":{"host":"az1-h2","guest":"g2"},"previous":{"host":"az1-h1","guest":"g2","underlay":"224.0.0.1","vsid":5112,"until":"2030-01-02T03:04:15Z"}}`
	for _, k := range []string{store.Key(model.KindEIP, "198.51.100.9"), store.ScopeKey(placement.HostScope("az1-h1"), model.KindEIP, "198.51.100.9")} {
		if _, err := s.Client.Put(ctx, k, bad); err != nil {
			t.Fatal(err)
		}
	}
	// The clearing write, before Until: the copy leaves az1-h1's scope.
	if rev, err = placementtest.Put(ctx, s, &model.EIP{Address: v4, Binding: &model.Binding{Host: "az1-h2", Guest: "g1"}}); err != nil {
		t.Fatal(err)
	}
	at(rev, func() {
		if e, ok := fake.EIPMap[a("198.51.100.9")]; ok {
			t.Errorf("an EIP whose previous binding is invalid is programmed: %+v", e)
		}
		ns := r.Status(t0, nil)
		store.ReportInvalid(&ns, s.Invalid)
		if ns.InvalidTotal != 1 || !strings.Contains(ns.Invalid[0].Reason, "previous.underlay") {
			t.Errorf("status lists %+v", ns.Invalid)
		}
		if e, ok := fake.EIPMap[v4]; ok {
			t.Errorf("after the clearing write: %+v", e)
		}
		if p := timers.pending(t); p != nil {
			t.Errorf("a drain timer left: %+v", p)
		}
	})
}
