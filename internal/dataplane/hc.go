package dataplane

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Health checks that travel the tunnel (bpf/lib/hc.h, bpf/lib/agenthc.h):
// the edge's checker marks its socket per backend, tc_edge_hc encapsulates
// what leaves the health-check device by that mark, and xdp_edge passes
// the guest's replies to the health-check address up to the kernel.

// HealthTarget is what a health-check mark stands for: an encap-mode
// backend, reached in NVGRE to its host.
type HealthTarget struct {
	Host  netip.Addr // the host's underlay address (IPv4, or IPv6: a host of the IPv6 underlay)
	Guest netip.Addr // the guest's private address: IPv4 (hc_marks), or its IPv6 address (hc_marks6)
	VSID  uint32
}

// HealthMaps is what the edge's tunnel health checks need from the data
// plane (the Edge implements it; a separate interface so EdgeMaps and its
// fakes stay as they are).
type HealthMaps interface {
	// SetHealthAddress sets the health-check address (the invalid Addr:
	// tunnel checks off).
	SetHealthAddress(netip.Addr) error
	// SetHealthAddress6 sets the IPv6 health-check address, the source
	// of the checks of IPv6 guests (the invalid Addr: none).
	SetHealthAddress6(netip.Addr) error
	// SetHealthTargets replaces the marks and the backends replies may
	// come from.
	SetHealthTargets(map[uint32]HealthTarget) error
}

var _ HealthMaps = (*Edge)(nil)

// hcStatNames name the hc_stats slots, in the order of enum hc_stat.
var hcStatNames = []string{
	"hc_probe_tx",
	"hc_reply_pass",
	"hc_drop_no_mark",
	"hc_drop_bad",
	"hc_drop_fib",
	"hc_drop_headroom",
	"hc_drop_peer",
	"hc_drop_direct",
	"hc_drop_no_sock",
}

// HealthProgram is the TCX egress program of the health-check device.
func (e *Edge) HealthProgram() *ebpf.Program { return e.objs.TcEdgeHc }

// SetHealthAddress writes the health-check address into the loaded
// programs (a global: set it before attaching them, as Run does).
func (e *Edge) SetHealthAddress(a netip.Addr) error {
	var w uint32
	if a.IsValid() {
		if !a.Is4() {
			return fmt.Errorf("health-check address %v: IPv4 only", a)
		}
		w = ip4word(a)
	}
	if err := e.objs.HcAddress.Set(w); err != nil {
		return fmt.Errorf("set the health-check address %v: %w", a, err)
	}
	return nil
}

// SetHealthAddress6 writes the IPv6 health-check address (HC6) into the
// loaded programs, as SetHealthAddress. It must be a global unicast
// address outside fc00::/7 (the edge drops NVGRE whose inner destination
// is unique-local before it looks at HC6).
func (e *Edge) SetHealthAddress6(a netip.Addr) error {
	var w edgeIpAddr
	if a.IsValid() {
		if err := checkHealthSource6(a); err != nil {
			return err
		}
		w, _, _ = addrTo(a)
	}
	if err := e.objs.HcAddress6.Set(w); err != nil {
		return fmt.Errorf("set the IPv6 health-check address %v: %w", a, err)
	}
	return nil
}

// checkHealthSource6 says what is wrong with a as the IPv6 health-check
// address, or nil.
func checkHealthSource6(a netip.Addr) error {
	if !plain6(a) || !a.IsGlobalUnicast() || a.IsPrivate() {
		return fmt.Errorf("IPv6 health-check address %v: want a global unicast IPv6 address (not IPv4-mapped, not in fc00::/7)", a)
	}
	return nil
}

// healthGuest6OK says whether a may be an IPv6 guest's address in
// hc_peers, whose IPv4 guests have the last 12 bytes zero: none in ::/96.
func healthGuest6OK(a netip.Addr) bool {
	if !plain6(a) {
		return false
	}
	b := a.As16()
	for _, x := range b[:12] {
		if x != 0 {
			return true
		}
	}
	return false
}

// SetHealthTargets replaces hc_marks (IPv4 guests) and hc_marks6 (IPv6
// guests) with targets and hc_peers with their (host, VSID, guest). A
// host of the IPv6 underlay is named as the routes name it (ul6_hosts).
func (e *Edge) SetHealthTargets(targets map[uint32]HealthTarget) error {
	peers := map[edgeHcPeer]bool{}
	for mark, t := range targets {
		host, err := e.hostWord(t.Host)
		if err != nil || host == 0 {
			return fmt.Errorf("health target of mark %#x: host %v: %v", mark, t.Host, err)
		}
		p := edgeHcPeer{Host: host, Vsid: t.VSID}
		switch {
		case t.Guest.Is4():
			v := edgeHcTarget{Host: host, Guest: ip4word(t.Guest), Vsid: t.VSID}
			if err := e.objs.HcMarks.Update(mark, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("health target of mark %#x (%v on %v): %w", mark, t.Guest, t.Host, err)
			}
			p.Guest.A[0] = v.Guest
		case healthGuest6OK(t.Guest) && e.objs.HcMarks6 != nil:
			p.Guest, _, _ = addrTo(t.Guest)
			v := edgeHcTarget6{Host: host, Vsid: t.VSID, Guest: p.Guest}
			if err := e.objs.HcMarks6.Update(mark, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("health target of mark %#x (%v on %v): %w", mark, t.Guest, t.Host, err)
			}
		default:
			return fmt.Errorf("health target of mark %#x: guest %v: want an IPv4 address or an IPv6 one outside ::/96", mark, t.Guest)
		}
		if !peers[p] {
			peers[p] = true
			if err := e.objs.HcPeers.Update(&p, uint32(1), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("health peer %v on %v: %w", t.Guest, t.Host, err)
			}
		}
	}
	keep := func(m uint32) bool { _, ok := targets[m]; return ok }
	keep4 := func(m uint32) bool { return keep(m) && targets[m].Guest.Is4() }
	keep6 := func(m uint32) bool { return keep(m) && !targets[m].Guest.Is4() }
	if err := deleteStale[uint32, edgeHcTarget](e.objs.HcMarks, keep4); err != nil {
		return err
	}
	if e.objs.HcMarks6 != nil {
		if err := deleteStale[uint32, edgeHcTarget6](e.objs.HcMarks6, keep6); err != nil {
			return err
		}
	}
	return deleteStale[edgeHcPeer, uint32](e.objs.HcPeers, func(p edgeHcPeer) bool { return peers[p] })
}

// HealthStats reads the health-check path's counters.
func (e *Edge) HealthStats() (map[string]Count, error) {
	out := make(map[string]Count, len(hcStatNames))
	var vals []edgeStatEntry
	for i, name := range hcStatNames {
		if err := e.objs.HcStats.Lookup(uint32(i), &vals); err != nil {
			return nil, fmt.Errorf("read health stat %s: %w", name, err)
		}
		out[name] = sumStats(vals)
	}
	return out, nil
}

// AttachHealth attaches tc_edge_hc to the egress of the health-check
// device (TCX), replacing the program of a pinned link (pinned under
// PIN_DIR/tc, apart from the XDP links) so a restart swaps it atomically.
func (e *Edge) AttachHealth(ifname string) error {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("attach health-check program to %s: %w", ifname, err)
	}
	var pin string
	if e.pinDir != "" {
		if err := os.MkdirAll(filepath.Join(e.pinDir, "tc"), 0o700); err != nil {
			return err
		}
		pin = filepath.Join(e.pinDir, "tc", ifname)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			if info, ierr := l.Info(); ierr == nil && info.TCX() != nil && int(info.TCX().Ifindex) == iface.Index {
				if uerr := l.Update(e.objs.TcEdgeHc); uerr == nil {
					l.Close()
					return nil
				}
			}
			l.Unpin()
			l.Close()
		}
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: e.objs.TcEdgeHc, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return fmt.Errorf("attach TCX egress to %s: %w", ifname, err)
	}
	if pin == "" {
		e.links["tc/"+ifname] = l
		return nil
	}
	defer l.Close() // the pin keeps it attached
	if err := l.Pin(pin); err != nil {
		return fmt.Errorf("pin the TCX link of %s: %w", ifname, err)
	}
	return nil
}

// HealthGuest is a port an edge's health check reaches a guest of the
// host on through the tunnel: the guest's private address (IPv4, or its
// IPv6 address, agent_hc_guests6), its VSID, the checked port and
// protocol (ProtoTCP or ProtoUDP).
type HealthGuest struct {
	Guest netip.Addr
	VSID  uint32
	Proto uint8
	Port  uint16
	// Ifindex: an IPv6 guest's host-side interface (its answers must come
	// from it, as an IPv6 VIP flow's); 0 for an IPv4 guest.
	Ifindex uint32
}

// HealthGuests is what the agent's side of tunnel health checks needs (the
// Agent implements it; separate from AgentMaps so its fakes stay as they
// are).
type HealthGuests interface {
	// SetHealthGuests replaces the checked ports of the host's guests an
	// edge's health check may reach (nothing else reaches a private
	// address through the tunnel).
	SetHealthGuests([]HealthGuest) error
}

var _ HealthGuests = (*Agent)(nil)

// checkHealthGuest is what SetHealthGuests refuses (the fake agent
// refuses the same).
func checkHealthGuest(g HealthGuest) error {
	if !g.Guest.Is4() && !plain6(g.Guest) {
		return fmt.Errorf("health-check guest %v: want an IPv4 or IPv6 address", g.Guest)
	}
	if g.Proto != ProtoTCP && g.Proto != ProtoUDP {
		return fmt.Errorf("health-check guest %v port %d: protocol %d, want TCP or UDP", g.Guest, g.Port, g.Proto)
	}
	if g.Port == 0 {
		return fmt.Errorf("health-check guest %v: port 0", g.Guest)
	}
	if g.Guest.Is6() && g.Ifindex == 0 {
		return fmt.Errorf("health-check guest %v port %d: an IPv6 guest needs its interface (ifindex)", g.Guest, g.Port)
	}
	return nil
}

// SetHealthGuests replaces agent_hc_guests (IPv4 guests) and
// agent_hc_guests6 (IPv6 guests).
func (a *Agent) SetHealthGuests(guests []HealthGuest) error {
	keep := map[agentHcGuestKey]bool{}
	keep6 := map[agentHcGuest6Key]bool{}
	for _, g := range guests {
		if err := checkHealthGuest(g); err != nil {
			return err
		}
		if g.Guest.Is6() {
			ip, _, _ := addrTo(g.Guest)
			k := agentHcGuest6Key{Guest: agentIpAddr(ip), Port: be16(g.Port), Proto: g.Proto}
			keep6[k] = true
			v := agentHcGuest6{Vsid: g.VSID, Ifindex: g.Ifindex}
			if err := a.objs.AgentHcGuests6.Update(&k, &v, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("health-check guest %v port %d/%d (VSID %d): %w", g.Guest, g.Port, g.Proto, g.VSID, err)
			}
			continue
		}
		k := agentHcGuestKey{Guest: ip4word(g.Guest), Port: be16(g.Port), Proto: g.Proto}
		keep[k] = true
		if err := a.objs.AgentHcGuests.Update(&k, g.VSID, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("health-check guest %v port %d/%d (VSID %d): %w", g.Guest, g.Port, g.Proto, g.VSID, err)
		}
	}
	if err := deleteStale[agentHcGuestKey, uint32](a.objs.AgentHcGuests, func(k agentHcGuestKey) bool { return keep[k] }); err != nil {
		return err
	}
	return deleteStale[agentHcGuest6Key, agentHcGuest6](a.objs.AgentHcGuests6, func(k agentHcGuest6Key) bool { return keep6[k] })
}
