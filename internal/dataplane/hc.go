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
	Host  netip.Addr // the host's underlay address
	Guest netip.Addr // the guest's private address
	VSID  uint32
}

// HealthMaps is what the edge's tunnel health checks need from the data
// plane (the Edge implements it; a separate interface so EdgeMaps and its
// fakes stay as they are).
type HealthMaps interface {
	// SetHealthAddress sets the health-check address (the invalid Addr:
	// tunnel checks off).
	SetHealthAddress(netip.Addr) error
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

// SetHealthTargets replaces hc_marks with targets and hc_peers with their
// (host, guest, VSID).
func (e *Edge) SetHealthTargets(targets map[uint32]HealthTarget) error {
	peers := map[edgeHcPeer]bool{}
	for mark, t := range targets {
		if !t.Host.Is4() || !t.Guest.Is4() {
			return fmt.Errorf("health target of mark %#x: host %v and guest %v must be IPv4", mark, t.Host, t.Guest)
		}
		v := edgeHcTarget{Host: ip4word(t.Host), Guest: ip4word(t.Guest), Vsid: t.VSID}
		if err := e.objs.HcMarks.Update(mark, &v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("health target of mark %#x (%v on %v): %w", mark, t.Guest, t.Host, err)
		}
		p := edgeHcPeer{Host: v.Host, Guest: v.Guest, Vsid: t.VSID}
		if !peers[p] {
			peers[p] = true
			if err := e.objs.HcPeers.Update(&p, uint32(1), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("health peer %v on %v: %w", t.Guest, t.Host, err)
			}
		}
	}
	if err := deleteStale[uint32, edgeHcTarget](e.objs.HcMarks, func(m uint32) bool { _, ok := targets[m]; return ok }); err != nil {
		return err
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
// host on through the tunnel: the guest's private address, its VSID, the
// checked port and protocol (ProtoTCP or ProtoUDP).
type HealthGuest struct {
	Guest netip.Addr
	VSID  uint32
	Proto uint8
	Port  uint16
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

// SetHealthGuests replaces agent_hc_guests.
func (a *Agent) SetHealthGuests(guests []HealthGuest) error {
	keep := map[agentHcGuestKey]bool{}
	for _, g := range guests {
		if !g.Guest.Is4() {
			return fmt.Errorf("health-check guest %v: IPv4 only", g.Guest)
		}
		if g.Proto != ProtoTCP && g.Proto != ProtoUDP {
			return fmt.Errorf("health-check guest %v port %d: protocol %d, want TCP or UDP", g.Guest, g.Port, g.Proto)
		}
		if g.Port == 0 {
			return fmt.Errorf("health-check guest %v: port 0", g.Guest)
		}
		k := agentHcGuestKey{Guest: ip4word(g.Guest), Port: be16(g.Port), Proto: g.Proto}
		keep[k] = true
		if err := a.objs.AgentHcGuests.Update(&k, g.VSID, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("health-check guest %v port %d/%d (VSID %d): %w", g.Guest, g.Port, g.Proto, g.VSID, err)
		}
	}
	return deleteStale[agentHcGuestKey, uint32](a.objs.AgentHcGuests, func(k agentHcGuestKey) bool { return keep[k] })
}
