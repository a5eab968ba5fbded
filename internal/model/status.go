package model

import (
	"net/netip"
	"time"
)

// Count is a packet and byte count.
type Count struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// EIPCounters are one EIP's counters on a node (rx: Internet to guest,
// tx: guest to Internet).
type EIPCounters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	// RxSyns counts TCP SYNs without ACK among RxPackets (edges only).
	RxSyns uint64 `json:"rx_syns,omitempty"`
}

// LimitDrops are the packets one address's rate limits dropped on an
// edge: over a source's rate, and SYNs over the SYN guard.
type LimitDrops struct {
	Source uint64 `json:"source"`
	SYN    uint64 `json:"syn"`
}

// NodeStatus is what an edge or agent publishes about itself under
// /azgate/status/ROLE/NAME (with a lease: it vanishes when the daemon is
// gone for longer than the lease TTL; the data plane may still forward).
type NodeStatus struct {
	Role            string    `json:"role"` // "edge" or "agent"
	Name            string    `json:"name"`
	Version         string    `json:"version"`
	Started         time.Time `json:"started"`
	Updated         time.Time `json:"updated"`
	AppliedRevision int64     `json:"applied_revision"` // store revision the maps reflect
	Interfaces      []string  `json:"interfaces"`       // where XDP is attached
	Routes          int       `json:"routes"`           // EIP routes (edge) or hosted EIPs (agent)
	// Draining counts the EIPs moved to another host whose previous
	// binding is still in force here (EIP.Previous, docs/eip.md): on an
	// edge, the routes that still name the previous host; on an agent,
	// the EIPs it still translates for their previous guest.
	Draining int                    `json:"draining,omitempty"`
	Counters map[string]Count       `json:"counters"`       // per-reason data-plane counters
	EIPs     map[string]EIPCounters `json:"eips,omitempty"` // per-EIP counters (bound EIPs)
	// LimitDrops are what each EIP's or VIP's rate limits dropped on
	// this edge, by address (addresses with limits only; edges only).
	LimitDrops map[string]LimitDrops `json:"limit_drops,omitempty"`
	Errors     []string              `json:"errors,omitempty"` // reconcile problems
	// HealthCommands are the names of the commands the edge's
	// configuration lets command health checks run (edges only; never
	// their paths or arguments).
	HealthCommands []string `json:"health_commands,omitempty"`
	// Tables are the service tables the edge's data plane holds, by
	// TableKey(service, pool) (edges only).
	Tables map[string]TableStatus `json:"tables,omitempty"`
	// NATBackendsLeftOut counts the nat backends (address, port,
	// protocol) left out of the reply path's stateless fallback: shared
	// by two VIPs or ports, or behind a range or any-port listener (their
	// replies wait for the connection's synced entry; docs/services.md).
	NATBackendsLeftOut int `json:"nat_backends_left_out,omitempty"`
	// Invalid lists the objects read from the store that failed
	// validation (written past the API, straight into etcd): they are not
	// programmed until a valid write of the same key replaces them.
	// (at most 100, sorted by kind and key; InvalidTotal counts them all).
	Invalid      []InvalidObject `json:"invalid,omitempty"`
	InvalidTotal int             `json:"invalid_total,omitempty"`
	// BGP is the edge's speaker: sessions, advertised prefixes and the
	// conditions that keep it from announcing (edges only).
	BGP *BGPStatus `json:"bgp,omitempty"`
	// ARP is the edge's ARP ownership on a shared segment (edges with
	// --arp-iface only): exactly one member of a set answers ARP there.
	ARP *ARPStatus `json:"arp,omitempty"`
	// Sync is the edge's connection sync with the other members of its
	// set (edges running it only; its counters are the sync_* ones).
	Sync *SyncStatus `json:"sync,omitempty"`
	// Firewall holds each firewall rule's counters on this edge, by rule
	// name: packets and bytes it dropped (deny) or let through (allow)
	// since the edge programmed it (edges only; left out above 4096
	// rules, whose counters /metrics does not carry either).
	Firewall map[string]Count `json:"firewall,omitempty"`
	// Bandwidth is the node's shared-bandwidth reporting and
	// enforcement (agents and edges with --bw-store only).
	Bandwidth *BandwidthStatus `json:"bandwidth,omitempty"`
	// GSLB is the gslb role's DNS server and target health (gslb nodes
	// only; dns.go).
	GSLB *GSLBStatus `json:"gslb,omitempty"`
	// Monitor is the data plane's event monitor (edges and agents;
	// docs/observability.md).
	Monitor *MonitorStatus `json:"monitor,omitempty"`
}

// MonitorStatus is a node's data-plane monitor: its mode (off, drops,
// trace) and its events summed over the CPUs since the programs were
// loaded: written to the ring, refused by the per-CPU rate limit, and
// refused by a full ring.
type MonitorStatus struct {
	Mode     string `json:"mode"`
	Sent     uint64 `json:"sent"`
	LostRate uint64 `json:"lost_rate"`
	LostFull uint64 `json:"lost_full"`
}

// ARPStatus says whether an edge answers ARP for its set's VIPs (and its
// gateway address) on its ARP interfaces.
type ARPStatus struct {
	// Scope is the edge set whose ARP ownership the edge holds or waits
	// for ("": none, as it is in no set or drained).
	Scope string `json:"scope"`
	Owner bool   `json:"owner"`
	// Since is when Scope or Owner last changed.
	Since      time.Time `json:"since"`
	Interfaces []string  `json:"interfaces"`
	// IPv6 are the IPv6 addresses whose neighbor solicitations the edge
	// answers on Interfaces while Owner (under the same ownership as
	// ARP): the set's IPv6 VIPs and the --arp-gateway6.
	IPv6 []netip.Addr `json:"ipv6,omitempty"`
}

// SyncStatus is an edge's connection sync (docs/connsync.md).
type SyncStatus struct {
	Ready  bool   `json:"ready"`  // it holds the table a member needs (a full copy, or it is the first)
	Reason string `json:"reason"` // why Ready is what it is
	// Lag from a connection event to its batch's acknowledgement by the
	// peer, over the last samples, in milliseconds.
	LagP50MS float64          `json:"lag_p50_ms"`
	LagP99MS float64          `json:"lag_p99_ms"`
	LagMaxMS float64          `json:"lag_max_ms"`
	Peers    []SyncPeerStatus `json:"peers,omitempty"`
}

// SyncPeerStatus is the edge's session to one member of its set.
type SyncPeerStatus struct {
	Name      string `json:"name"`
	Addr      string `json:"addr"`
	Connected bool   `json:"connected"`
	Queued    int    `json:"queued"` // batches waiting to be sent
	Error     string `json:"error,omitempty"`
}

// InvalidObject is one stored object a node refused to program.
type InvalidObject struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// TableStatus describes one pool's Maglev table on an edge, so operators
// can see that every edge holds the same one.
type TableStatus struct {
	Checksum string `json:"checksum"` // maglev Table.Checksum of the slots, formatted "%016x"
	Backends int    `json:"backends"` // backends in the table
	Healthy  int    `json:"healthy"`  // of which not failed (down or drained)
	M        uint64 `json:"m"`        // table size
}

// TableKey is the key of a pool's table in NodeStatus.Tables: "service/pool".
func TableKey(service, pool string) string { return service + "/" + pool }
