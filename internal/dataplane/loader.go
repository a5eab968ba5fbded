package dataplane

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/lbplan"
)

// BPFFS is where bpffs is expected; EnsureBPFFS mounts it when it is not.
const BPFFS = "/sys/fs/bpf"

// EnsureBPFFS mounts bpffs on BPFFS unless it is already there.
func EnsureBPFFS() error {
	var st unix.Statfs_t
	if err := unix.Statfs(BPFFS, &st); err == nil && st.Type == unix.BPF_FS_MAGIC {
		return nil
	}
	if err := os.MkdirAll(BPFFS, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("bpf", BPFFS, "bpf", 0, ""); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", BPFFS, err)
	}
	return nil
}

// NodePinDir is the pin directory of one node's data plane.
func NodePinDir(node string) string { return filepath.Join(BPFFS, "azgate", node) }

// EIPMaxDefault, ConnMaxDefault, ListenerMaxDefault and BackendMaxDefault
// are the edge's compiled capacities (EIP_MAX, CT_MAX, LB_LISTENERS_MAX,
// LB_BACKENDS_MAX in bpf/lib/consts.h), AgentEIPMaxDefault the agent's
// (AGENT_EIP_MAX): what LoadOptions.EIPMax, ConnMax, ListenerMax,
// BackendMax and AgentEIPMax 0 mean, and the most the edge's and agent's
// configurations accept.
const (
	EIPMaxDefault      = 1 << 20
	ConnMaxDefault     = 1 << 20
	ListenerMaxDefault = lbplan.ListenersMax
	BackendMaxDefault  = lbplan.BackendsMax
	AgentEIPMaxDefault = 1 << 16
	// DriftFlowsDefault is drift_flows' compiled capacity
	// (DRIFT_FLOWS_MAX): LoadOptions.DriftFlows 0; DriftFlowsMax the
	// most the edge's configuration accepts (--drift-flows).
	DriftFlowsDefault = 1 << 16
	DriftFlowsMax     = 1 << 20
)

// LoadOptions controls how a data plane is loaded.
type LoadOptions struct {
	// PinDir holds the maps (by name), their layouts (azg_layout) and the
	// XDP links (links/IFNAME). Existing pinned maps are reused, or
	// migrated when this version's layout differs (upgrade.go), so state
	// survives a restart and an upgrade. Empty: nothing is pinned and
	// everything goes away on Close (tests).
	PinDir string
	// EIPMax overrides the capacity of the edge's maps with an entry per
	// EIP or VIP (eip_routes, eip_stats, eip_bw_slots, fw_dst; EIP_MAX,
	// 1M entries, by default), and caps those with an entry per EIP or
	// VIP with a limit (edge_limits, eip_bw: 64k entries by default) when
	// it is below theirs.
	EIPMax uint32
	// ConnMax overrides the capacity of the edge's connection tables
	// (lb_conns, lb_nat_conns; CT_MAX, 1M entries, by default).
	ConnMax uint32
	// ConnMax6 overrides the capacity of the IPv6 VIPs' connection table
	// (lb_conns6); 0: a quarter of ConnMax, or CT6_MAX (256k entries)
	// without it.
	ConnMax6 uint32
	// DriftFlows overrides the capacity of the drifting EIPs' flow table
	// (drift_flows, an LRU; DRIFT_FLOWS_MAX, 64k entries, by default).
	DriftFlows uint32
	// ListenerMax overrides the capacity of the edge's single-port
	// listener map (lb_listeners; LB_LISTENERS_MAX, 256k entries, by
	// default).
	ListenerMax uint32
	// BackendMax overrides the capacity of the edge's maps with an entry
	// per service backend (lb_backends, lb_be_stats, lb_nat_backends,
	// hc_marks, hc_peers; 64k entries by default).
	BackendMax uint32
	// AgentEIPMax overrides the capacity of the agent's maps with an entry
	// per EIP of its host's guests (agent_eips, agent_guests, eip_stats,
	// eip_bw_slots, eip_bw; AGENT_EIP_MAX, 64k entries, by default).
	AgentEIPMax uint32
	// AgentFlowMax overrides the capacity of the agent's flow table
	// (AGENT_FLOW_MAX, 1M entries, by default), and gives its IPv6 flow
	// table (agent_flows6, AGENT_FLOW6_MAX: 256k) a quarter of it.
	AgentFlowMax uint32
	// AllowDrop names pinned maps of ClassRequired an upgrade may start
	// empty when they cannot be migrated ("all": any); without it such an
	// upgrade is refused (docs/upgrades.md).
	AllowDrop []string
}

func loadErr(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("load %s: verifier rejected the program: %+v", what, ve)
	}
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return fmt.Errorf("load %s: a pinned map no longer matches this version's definition "+
			"(see docs/upgrades.md; azgate dataplane-reset starts with empty maps): %w", what, err)
	}
	return fmt.Errorf("load %s: %w", what, err)
}

// attachXDP attaches prog to the interface, replacing whatever azgate
// program the pinned link there held (an atomic swap: no packet goes
// unprocessed). With an empty pinDir the link lives as long as the
// returned Link.
func attachXDP(prog *ebpf.Program, ifname, pinDir string) (link.Link, error) {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", ifname, err)
	}
	var pin string
	if pinDir != "" {
		pin = filepath.Join(pinDir, "links", ifname)
		if l, err := link.LoadPinnedLink(pin, nil); err == nil {
			if info, ierr := l.Info(); ierr == nil && info.XDP() != nil && int(info.XDP().Ifindex) == iface.Index {
				if uerr := l.Update(prog); uerr == nil {
					l.Close()
					return nil, nil
				}
			}
			// Stale link (interface recreated, or update refused): replace it.
			l.Unpin()
			l.Close()
		}
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index})
	if err != nil {
		return nil, fmt.Errorf("attach XDP to %s: %w", ifname, err)
	}
	if pin == "" {
		return l, nil
	}
	if err := l.Pin(pin); err != nil {
		l.Close()
		return nil, fmt.Errorf("pin XDP link of %s: %w", ifname, err)
	}
	l.Close() // the pin keeps it attached
	return nil, nil
}

// detachXDP removes the pinned link of an interface, detaching the program.
func detachXDP(ifname, pinDir string) error {
	pin := filepath.Join(pinDir, "links", ifname)
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("detach %s: %w", ifname, err)
	}
	defer l.Close()
	return l.Unpin()
}

// attachedLinks lists the interfaces with a pinned link under pinDir.
func attachedLinks(pinDir string) []string {
	ents, _ := os.ReadDir(filepath.Join(pinDir, "links"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// RemovePins detaches every program pinned under dir and removes the maps:
// the node's data plane is gone afterwards.
func RemovePins(dir string) error {
	for _, ifname := range attachedLinks(dir) {
		if err := detachXDP(ifname, dir); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(filepath.Clean(dir), BPFFS+"/") {
		return fmt.Errorf("refusing to remove %s: not under %s", dir, BPFFS)
	}
	return os.RemoveAll(dir)
}

// sumPerCPUStats folds per-CPU counter slots.
func sumStats(vals []edgeStatEntry) Count {
	var c Count
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c
}

func readStats(m *ebpf.Map) (map[string]Count, error) {
	out := make(map[string]Count, len(statNames))
	var vals []edgeStatEntry
	for i, name := range statNames {
		if err := m.Lookup(uint32(i), &vals); err != nil {
			return nil, fmt.Errorf("read stat %s: %w", name, err)
		}
		out[name] = sumStats(vals)
	}
	return out, nil
}

func readEIPStats(m *ebpf.Map, idx uint32) (Counters, error) {
	var vals []edgeEipStats
	if err := m.Lookup(idx, &vals); err != nil {
		return Counters{}, fmt.Errorf("read EIP counters slot %d: %w", idx, err)
	}
	var c Counters
	for _, v := range vals {
		c.RxPackets += v.RxPackets
		c.RxBytes += v.RxBytes
		c.TxPackets += v.TxPackets
		c.TxBytes += v.TxBytes
		c.RxSyns += v.RxSyns
	}
	return c, nil
}

// readEIPStatsBatch sums the per-CPU counters of slots 0..len(out)-1 into
// out, 4096 slots per system call (a rate reading of a million EIPs costs
// 250 calls instead of a million; the rate reports read every slot four
// times a second).
func readEIPStatsBatch(m *ebpf.Map, out []Counters) error {
	const chunk = 4096
	ncpu := ebpf.MustPossibleCPU()
	keys := make([]uint32, chunk)
	vals := make([]edgeEipStats, chunk*ncpu)
	var cursor ebpf.MapBatchCursor
	for done := 0; done < len(out); {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			k := int(keys[i])
			if k >= len(out) {
				continue
			}
			var c Counters
			for _, v := range vals[i*ncpu : (i+1)*ncpu] {
				c.RxPackets += v.RxPackets
				c.RxBytes += v.RxBytes
				c.TxPackets += v.TxPackets
				c.TxBytes += v.TxBytes
				c.RxSyns += v.RxSyns
			}
			out[k] = c
		}
		done += n
		if errors.Is(err, ebpf.ErrKeyNotExist) || n == 0 {
			break
		}
		if err != nil {
			return fmt.Errorf("read EIP counters from slot %d: %w", done, err)
		}
	}
	return nil
}

func resetEIPStats(m *ebpf.Map, idx uint32) error {
	zero := make([]edgeEipStats, ebpf.MustPossibleCPU())
	if err := m.Update(idx, zero, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("reset EIP counters slot %d: %w", idx, err)
	}
	return nil
}

// DetachPinned detaches the program whose link is pinned for ifname.
func DetachPinned(pinDir, ifname string) error { return detachXDP(ifname, pinDir) }

// AttachPinned attaches prog to an interface of the current namespace with
// a link pinned under pinDir/links (see attachXDP): it stays attached after
// the caller exits, until RemovePins(pinDir).
func AttachPinned(prog *ebpf.Program, ifname, pinDir string) error {
	if err := os.MkdirAll(filepath.Join(pinDir, "links"), 0o700); err != nil {
		return err
	}
	_, err := attachXDP(prog, ifname, pinDir)
	return err
}

// CountPinnedRoutes counts the routes of a pinned edge route map (batch
// lookups of 64k entries).
func CountPinnedRoutes(pinDir string) (int, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapEipRoutes), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer m.Close()
	keys := make([]edgeEipKey, 65536)
	vals := make([]edgeEipRoute, 65536)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// PinnedRoute reads one route from a pinned edge route map.
func PinnedRoute(pinDir string, a netip.Addr) (Route, bool, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapEipRoutes), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return Route{}, false, err
	}
	defer m.Close()
	k, err := keyOf(a)
	if err != nil {
		return Route{}, false, err
	}
	var v edgeEipRoute
	if err := m.Lookup(&k, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Route{}, false, nil
		}
		return Route{}, false, err
	}
	return routeOf(v, nil, pinnedHostOf(pinDir)), true, nil // (without a drifting route's previous binding)
}

// deleteStale deletes every entry of m whose key keep rejects: the second
// half of replacing a map's contents (write the wanted entries first, then
// drop the rest, so a reader never sees a wanted entry missing). K and V
// are the map's key and value types.
func deleteStale[K comparable, V any](m *ebpf.Map, keep func(K) bool) error {
	var k K
	var v V
	var stale []K
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !keep(k) {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("reading %v: %w", m, err)
	}
	for _, k := range stale {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("deleting %+v from %v: %w", k, m, err)
		}
	}
	return nil
}

// PinnedStats reads the per-reason counters (StatNames) of a node's pinned
// data plane, edge or agent, without loading it: for tools and tests that
// watch a running daemon's drops.
func PinnedStats(pinDir string) (map[string]Count, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapStats), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return readStats(m)
}
