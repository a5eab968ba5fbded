package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/netns"
)

// VIPHops returns the next hops of a region's VIP in its router's kernel
// table (the servers BIRD learnt it from), sorted; none when only the
// unreachable fallback is left.
func (g *GSLBLab) VIPHops(r GSLBRegion) ([]netip.Addr, error) { return g.Hops(r, RegionVIP(r)) }

// Hops returns the next hops of one of a region's VIPs (IPv4 or IPv6) in
// its router's kernel table, sorted.
func (g *GSLBLab) Hops(r GSLBRegion, vip netip.Addr) ([]netip.Addr, error) {
	out, err := netns.Command(g.Topo.Node(r.Name+"-rtr").Netns, "ip", family(vip), "-j", "route", "show", netip.PrefixFrom(vip, vip.BitLen()).String()).Output()
	if err != nil {
		return nil, fmt.Errorf("%s-rtr: ip route: %w", r.Name, err)
	}
	var routes []struct {
		Type     string `json:"type"`
		Gateway  string `json:"gateway"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, fmt.Errorf("%s-rtr: ip -j route: %w", r.Name, err)
	}
	var hops []netip.Addr
	for _, rt := range routes {
		if rt.Type == "unreachable" {
			continue
		}
		gws := []string{rt.Gateway}
		for _, nh := range rt.Nexthops {
			gws = append(gws, nh.Gateway)
		}
		for _, gw := range gws {
			if a, err := netip.ParseAddr(gw); err == nil {
				hops = append(hops, a)
			}
		}
	}
	sort.Slice(hops, func(i, j int) bool { return hops[i].Less(hops[j]) })
	return hops, nil
}

// WaitVIPHops waits until the region's VIP has n next hops and returns
// how long that took.
func (g *GSLBLab) WaitVIPHops(ctx context.Context, r GSLBRegion, n int, timeout time.Duration) (time.Duration, error) {
	return g.WaitHops(ctx, r, RegionVIP(r), n, timeout)
}

// WaitHops waits until one of the region's VIPs has n next hops.
func (g *GSLBLab) WaitHops(ctx context.Context, r GSLBRegion, vip netip.Addr, n int, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var last []netip.Addr
	for {
		hops, err := g.Hops(r, vip)
		if err == nil && len(hops) == n {
			return time.Since(start), nil
		}
		last = hops
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("%s: VIP %v has next hops %v after %v, want %d", r.Name, vip, last, timeout, n)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DigQuery is a question the lab asks a gslb instance for pathd.example:
// its type (A or AAAA), the transport's family (IPv6: the instance's
// IPv6 address, from the prober's), and an ECS source prefix ("" none).
type DigQuery struct {
	Type   string
	V6     bool
	Subnet string
}

// The questions of the demo: A over IPv4, AAAA over IPv6.
var (
	DigA     = DigQuery{Type: "A"}
	DigAAAA6 = DigQuery{Type: "AAAA", V6: true}
)

func (q DigQuery) String() string {
	s := q.Type + " over IPv4"
	if q.V6 {
		s = q.Type + " over IPv6"
	}
	if q.Subnet != "" {
		s += " ECS " + q.Subnet
	}
	return s
}

// DigAnswer is the first address of a dig answer and, with ECS in the
// query, the answer's ECS scope (-1 without ECS in the answer).
type DigAnswer struct {
	Addr  netip.Addr
	Scope int
}

// Resolve asks region via's gslb for pathd.example A over IPv4 from
// region from's prober namespace (so the answer is located by the
// prober's address), with dig.
func (g *GSLBLab) Resolve(ctx context.Context, from, via GSLBRegion) (netip.Addr, error) {
	a, err := g.Dig(ctx, from, via, DigA)
	return a.Addr, err
}

// Dig asks region via's gslb a question for pathd.example from region
// from's prober namespace, with dig.
func (g *GSLBLab) Dig(ctx context.Context, from, via GSLBRegion, q DigQuery) (DigAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	server := DNSAddr(via)
	if q.V6 {
		server = DNSAddr6(via)
	}
	args := []string{"dig", "+noall", "+answer", "+comments", "+time=1", "+tries=1", "+notcp", "@" + server.String(), GSLBName, q.Type}
	if q.Subnet != "" {
		args = append(args, "+subnet="+q.Subnet)
	}
	cmd := netns.Command(g.Topo.Node(from.Name+"-prb").Netns, args...)
	out, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).Output()
	if err != nil {
		return DigAnswer{}, fmt.Errorf("dig @%v %s %s from %s-prb: %w", server, GSLBName, q.Type, from.Name, err)
	}
	a, err := parseDig(string(out), q.Type)
	if err != nil {
		return DigAnswer{}, fmt.Errorf("dig @%v %s %s from %s-prb: %w", server, GSLBName, q.Type, from.Name, err)
	}
	return a, nil
}

// parseDig reads dig's +noall +answer +comments output: the first answer
// of the type and the scope of the CLIENT-SUBNET line
// ("; CLIENT-SUBNET: 2001:db8:201:ff00::/56/48").
func parseDig(out, qtype string) (DigAnswer, error) {
	a := DigAnswer{Scope: -1}
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "; CLIENT-SUBNET: "); ok {
			i := strings.LastIndexByte(rest, '/')
			if n, err := strconv.Atoi(strings.TrimSpace(rest[i+1:])); i >= 0 && err == nil {
				a.Scope = n
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) == 5 && !strings.HasPrefix(line, ";") && f[3] == qtype && !a.Addr.IsValid() {
			if ip, err := netip.ParseAddr(f[4]); err == nil {
				a.Addr = ip
			}
		}
	}
	if !a.Addr.IsValid() {
		return a, fmt.Errorf("no %s in the answer %q", qtype, out)
	}
	return a, nil
}

func (g *GSLBLab) waitAnswer(ctx context.Context, from, via GSLBRegion, q DigQuery, want netip.Addr, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		a, err := g.Dig(ctx, from, via, q)
		if err == nil && a.Addr == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's gslb answers %s-prb %s with %v (%v), want %v after %v", via.Name, from.Name, q, a.Addr, err, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ProberStats are a region's prober's counters, read from its /metrics.
type ProberStats struct {
	Measurements, Sent, PostErrors, Rejected, Dropped, Queued, Moves float64
	Address                                                          netip.Addr
}

// Lost is what the prober can no longer deliver: dropped from a full
// queue or refused by pathd.
func (s ProberStats) Lost() float64 { return s.Dropped + s.Rejected }

// Prober reads a region's prober's metrics.
func (g *GSLBLab) Prober(ctx context.Context, r GSLBRegion) (ProberStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	cmd := netns.Command(g.Topo.Node(r.Name+"-prb").Netns, "curl", "-sf", "--max-time", "2",
		fmt.Sprintf("http://127.0.0.1:%d/metrics", proberMetricsPort))
	out, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).Output()
	if err != nil {
		return ProberStats{}, fmt.Errorf("%s-prb metrics: %w", r.Name, err)
	}
	var s ProberStats
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		// The series' labels (node on every one) are dropped but the
		// report address's.
		name, labels, _ := strings.Cut(name, "{")
		if _, rest, ok := strings.Cut(labels, `address="`); ok && name == "azgate_prober_report_address" {
			a, _, _ := strings.Cut(rest, `"`)
			name += `{address="` + a + `"}`
		}
		switch {
		case name == "azgate_prober_measurements_total":
			s.Measurements = v
		case name == "azgate_prober_sent_total":
			s.Sent = v
		case name == "azgate_prober_post_errors_total":
			s.PostErrors = v
		case name == "azgate_prober_rejected_total":
			s.Rejected = v
		case name == "azgate_prober_dropped_total":
			s.Dropped = v
		case name == "azgate_prober_queued":
			s.Queued = v
		case name == "azgate_prober_moves_total":
			s.Moves = v
		case strings.HasPrefix(name, `azgate_prober_report_address{address="`):
			a := strings.TrimSuffix(strings.TrimPrefix(name, `azgate_prober_report_address{address="`), `"}`)
			s.Address, _ = netip.ParseAddr(a)
		}
	}
	return s, nil
}

// WaitProber waits until a region's prober reports to want and has had
// at least minSent measurements acknowledged; it returns how long it
// waited and the last stats.
func (g *GSLBLab) WaitProber(ctx context.Context, r GSLBRegion, want netip.Addr, minSent float64, timeout time.Duration) (time.Duration, ProberStats, error) {
	start := time.Now()
	for {
		s, err := g.Prober(ctx, r)
		if err == nil && s.Address == want && s.Sent >= minSent {
			return time.Since(start), s, nil
		}
		if time.Since(start) > timeout {
			return 0, s, fmt.Errorf("%s-prb reports to %v with %v sent (%v), want %v and at least %v after %v", r.Name, s.Address, s.Sent, err, want, minSent, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitDrained waits until a region's prober has nothing queued beyond
// one round's worth (the targets of a round in flight) and returns its
// stats.
func (g *GSLBLab) WaitDrained(ctx context.Context, r GSLBRegion, timeout time.Duration) (ProberStats, error) {
	round := float64(len(GSLBRegions) + len(GSLBOrigins))
	start := time.Now()
	for {
		s, err := g.Prober(ctx, r)
		if err == nil && s.Queued <= round {
			return s, nil
		}
		if time.Since(start) > timeout {
			return s, fmt.Errorf("%s-prb still has %v measurements queued after %v (%v)", r.Name, s.Queued, timeout, err)
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// GSLBDemoResult is what DemoGSLB measured.
type GSLBDemoResult struct {
	// ServerWithdrawn: from eu-s1's pathd killed to its route gone.
	ServerWithdrawn time.Duration
	// RegionAnswer: from eu's pathds killed to eu's gslb answering
	// eu-prb with us's VIP; RegionMoved: to eu-prb's reports going there.
	RegionAnswer, RegionMoved time.Duration
	// Lost: reports eu-prb lost over both failures (dropped or refused).
	Lost float64
	// Retried: POSTs eu-prb retried over both failures.
	Retried float64
	// V6Answer: from eu's v6 VIP taken off its servers (its probes
	// failing, the v4 VIP untouched) to eu's gslb answering eu-prb's
	// AAAA with us's v6 VIP.
	V6Answer time.Duration
	// ECSScope6: the scope of eu's gslb's answer to an AAAA query with
	// an IPv6 ECS /56 inside eu's client network 2001:db8:201::/48.
	ECSScope6 int
}

// DemoGSLB walks through the GSLB lab's scenario (docs/lab.md, "The GSLB
// lab"): the probers report to their own regions; one server of eu dies
// (its route is withdrawn, no report lost); the whole of eu dies (the
// GSLB moves eu's prober to us, no report lost); eu comes back. It
// returns an error when a step does not happen in time or a report is
// lost.
func (g *GSLBLab) DemoGSLB(ctx context.Context) (GSLBDemoResult, error) {
	var res GSLBDemoResult
	err := g.demoGSLB(ctx, &res)
	return res, err
}

func (g *GSLBLab) demoGSLB(ctx context.Context, res *GSLBDemoResult) error {
	eu, us := GSLBRegions[0], GSLBRegions[1]
	g.say("\n== 1. every prober resolves pathd.example to its own region (A over IPv4, AAAA over IPv6) and reports there")
	for _, r := range GSLBRegions {
		a, err := g.Dig(ctx, r, r, DigA)
		if err != nil {
			return err
		}
		a6, err := g.Dig(ctx, r, r, DigAAAA6)
		if err != nil {
			return err
		}
		if a.Addr != RegionVIP(r) || a6.Addr != RegionVIP6(r) {
			return fmt.Errorf("%s's gslb answers %s-prb A %v, AAAA %v; want %v, %v", r.Name, r.Name, a.Addr, a6.Addr, RegionVIP(r), RegionVIP6(r))
		}
		hops, _ := g.Hops(r, RegionVIP(r))
		hops6, _ := g.Hops(r, RegionVIP6(r))
		_, s, err := g.WaitProber(ctx, r, ReportVIP(r, r), 10, 30*time.Second)
		if err != nil {
			return err
		}
		over := "IPv4"
		if ProberV6(r) {
			over = "IPv6"
		}
		g.say("   %s-prb (%v, %v): pathd.example A %v, AAAA %v", r.Name, ProberAddr(r), ProberAddr6(r), a.Addr, a6.Addr)
		g.say("      %s-rtr spreads them over %d servers %v and %v; %v reports sent over %s", r.Name, len(hops), hops, hops6, s.Sent, over)
	}
	ecs := DigQuery{Type: "AAAA", V6: true, Subnet: "2001:db8:201:ff00::/56"}
	a, err := g.Dig(ctx, us, eu, ecs)
	if err != nil {
		return err
	}
	res.ECSScope6 = a.Scope
	g.say("   us-prb asks eu's gslb AAAA with IPv6 ECS %s (eu's client network 2001:db8:201::/48): %v, scope /%d", ecs.Subnet, a.Addr, a.Scope)
	if a.Addr != RegionVIP6(eu) || a.Scope != ProberNet6(eu).Bits() {
		return fmt.Errorf("AAAA with ECS %s answered %v scope %d, want %v scope %d", ecs.Subnet, a.Addr, a.Scope, RegionVIP6(eu), ProberNet6(eu).Bits())
	}

	g.say("\n== 2. eu's IPv6 VIP fails its probes (taken off its servers' lo; the announcers keep it routed): AAAA moves to us, A stays in eu")
	t0 := time.Now()
	for k := 1; k <= GSLBServers; k++ {
		if err := g.VIPOnLo(eu, k, RegionVIP6(eu), false); err != nil {
			return err
		}
	}
	if err := g.waitAnswer(ctx, eu, eu, DigAAAA6, RegionVIP6(us), 10*time.Second); err != nil {
		return err
	}
	res.V6Answer = time.Since(t0)
	a, err = g.Dig(ctx, eu, eu, DigA)
	if err != nil {
		return err
	}
	hops6, err := g.Hops(eu, RegionVIP6(eu))
	if err != nil {
		return err
	}
	g.say("   eu's gslb answers eu-prb AAAA %v after %v; A still %v; eu-rtr still routes %v over %v", RegionVIP6(us), res.V6Answer.Round(time.Millisecond), a.Addr, RegionVIP6(eu), hops6)
	if a.Addr != RegionVIP(eu) {
		return fmt.Errorf("eu's v6 VIP down moved A too: %v, want %v", a.Addr, RegionVIP(eu))
	}
	if len(hops6) != GSLBServers {
		return fmt.Errorf("eu's v6 VIP has next hops %v while its probes fail, want the %d servers still announcing it", hops6, GSLBServers)
	}
	for k := 1; k <= GSLBServers; k++ {
		if err := g.VIPOnLo(eu, k, RegionVIP6(eu), true); err != nil {
			return err
		}
	}
	t0 = time.Now()
	if err := g.waitAnswer(ctx, eu, eu, DigAAAA6, RegionVIP6(eu), 10*time.Second); err != nil {
		return err
	}
	g.say("   eu's v6 VIP back on lo: AAAA is eu's %v again %v later", RegionVIP6(eu), time.Since(t0).Round(100*time.Millisecond))

	g.say("\n== 3. eu-s1's pathd dies (SIGKILL): its announcer withdraws eu's VIP from eu-rtr; no report lost")
	before, err := g.Prober(ctx, eu)
	if err != nil {
		return err
	}
	if err := g.Kill("eu-s1/pathd", syscall.SIGKILL); err != nil {
		return err
	}
	took, err := g.WaitVIPHops(ctx, eu, GSLBServers-1, 10*time.Second)
	if err != nil {
		return err
	}
	res.ServerWithdrawn = took
	hops, _ := g.VIPHops(eu)
	g.say("   route withdrawn %v after the kill: eu-rtr's next hops %v", took.Round(time.Millisecond), hops)
	time.Sleep(2 * time.Second)
	after, err := g.WaitDrained(ctx, eu, 10*time.Second)
	if err != nil {
		return err
	}
	g.say("   eu-prb meanwhile: %v reports sent, %v POSTs retried, %v lost", after.Sent-before.Sent, after.PostErrors-before.PostErrors, after.Lost()-before.Lost())
	res.Lost += after.Lost() - before.Lost()
	res.Retried += after.PostErrors - before.PostErrors
	if after.Lost() != before.Lost() {
		return fmt.Errorf("eu-prb lost %v reports while eu-s1 died", after.Lost()-before.Lost())
	}
	if err := g.StartPathd(eu, 1); err != nil {
		return err
	}
	if took, err = g.WaitVIPHops(ctx, eu, GSLBServers, 20*time.Second); err != nil {
		return err
	}
	g.say("   eu-s1's pathd restarted: announced again %v later", took.Round(100*time.Millisecond))

	g.say("\n== 4. the whole of eu dies (every pathd SIGKILLed): the GSLB moves eu's prober to us; no report lost")
	before, err = g.Prober(ctx, eu)
	if err != nil {
		return err
	}
	t0 = time.Now()
	for k := 1; k <= GSLBServers; k++ {
		if err := g.Kill(fmt.Sprintf("eu-s%d/pathd", k), syscall.SIGKILL); err != nil {
			return err
		}
	}
	if _, err := g.WaitVIPHops(ctx, eu, 0, 10*time.Second); err != nil {
		return err
	}
	withdrawn := time.Since(t0)
	if err := g.waitAnswer(ctx, eu, eu, DigA, RegionVIP(us), 10*time.Second); err != nil {
		return err
	}
	answered := time.Since(t0)
	if err := g.waitAnswer(ctx, eu, eu, DigAAAA6, RegionVIP6(us), 10*time.Second); err != nil {
		return err
	}
	moved, s, err := g.WaitProber(ctx, eu, RegionVIP(us), before.Sent+1, 15*time.Second)
	if err != nil {
		return err
	}
	moved += answered
	res.RegionAnswer, res.RegionMoved = answered, moved
	after, err = g.WaitDrained(ctx, eu, 15*time.Second)
	if err != nil {
		return err
	}
	g.say("   eu's routes withdrawn after %v; the GSLB answers eu-prb with us's VIP %v after %v (AAAA: %v); eu-prb reports to us from %v after the kill",
		withdrawn.Round(time.Millisecond), RegionVIP(us), answered.Round(time.Millisecond), RegionVIP6(us), moved.Round(time.Millisecond))
	g.say("   eu-prb meanwhile: %v reports sent, %v POSTs retried, %v lost, %v queued now (address moves %v)", after.Sent-before.Sent, after.PostErrors-before.PostErrors, after.Lost()-before.Lost(), s.Queued, after.Moves)
	res.Lost += after.Lost() - before.Lost()
	res.Retried += after.PostErrors - before.PostErrors
	if after.Lost() != before.Lost() {
		return fmt.Errorf("eu-prb lost %v reports while eu was down", after.Lost()-before.Lost())
	}

	g.say("\n== 5. eu comes back: its servers announce again and the GSLB sends eu-prb home")
	t0 = time.Now()
	for k := 1; k <= GSLBServers; k++ {
		if err := g.StartPathd(eu, k); err != nil {
			return err
		}
	}
	if _, err := g.WaitVIPHops(ctx, eu, GSLBServers, 20*time.Second); err != nil {
		return err
	}
	_, _, err = g.WaitProber(ctx, eu, RegionVIP(eu), 0, 20*time.Second)
	if err != nil {
		return err
	}
	g.say("   eu routed over %d servers again; eu-prb reports to eu %v after the restart", GSLBServers, time.Since(t0).Round(100*time.Millisecond))
	g.say("\nGSLB demo done. `azgate-lab lab gslb down` removes the lab.")
	return nil
}
