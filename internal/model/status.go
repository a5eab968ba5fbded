package model

import "time"

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
}

// NodeStatus is what an edge or agent publishes about itself under
// /azgate/status/ROLE/NAME (with a lease: it vanishes when the daemon is
// gone for longer than the lease TTL; the data plane may still forward).
type NodeStatus struct {
	Role            string                 `json:"role"` // "edge" or "agent"
	Name            string                 `json:"name"`
	Version         string                 `json:"version"`
	Started         time.Time              `json:"started"`
	Updated         time.Time              `json:"updated"`
	AppliedRevision int64                  `json:"applied_revision"` // store revision the maps reflect
	Interfaces      []string               `json:"interfaces"`       // where XDP is attached
	Routes          int                    `json:"routes"`           // EIP routes (edge) or hosted EIPs (agent)
	Counters        map[string]Count       `json:"counters"`         // per-reason data-plane counters
	EIPs            map[string]EIPCounters `json:"eips,omitempty"`   // per-EIP counters (bound EIPs)
	Errors          []string               `json:"errors,omitempty"` // reconcile problems
}
