package model

// BandwidthStatus is a node's shared-bandwidth reporting and enforcement
// (agents and edges run with --bw-store; docs/bandwidth.md, "Hosts:
// measurement and enforcement").
type BandwidthStatus struct {
	Zone      string `json:"zone"`      // the measurement store's zone the node reports to
	Direction string `json:"direction"` // "egress" (agents) or "ingress" (edges)
	// Mode is "managed" while limits from a manager are in force, else
	// "static" (the package's static split).
	Mode       string `json:"mode"`
	Generation uint64 `json:"generation,omitempty"` // of the managed limits held
	// LimitsAgeMS is the age of the managed limits held, since the
	// manager wrote them (-1: none).
	LimitsAgeMS int64 `json:"limits_age_ms"`
	// Counters since the node started (see bwenforce.HostCounts).
	Reports         uint64 `json:"reports"`
	ReportErrors    uint64 `json:"report_errors,omitempty"`
	LimitReads      uint64 `json:"limit_reads,omitempty"`
	LimitErrors     uint64 `json:"limit_errors,omitempty"`
	Ignored         uint64 `json:"ignored,omitempty"`
	Clamped         uint64 `json:"clamped,omitempty"`
	ApplyErrors     uint64 `json:"apply_errors,omitempty"`
	CounterErrors   uint64 `json:"counter_errors,omitempty"`
	StaticFallbacks uint64 `json:"static_fallbacks,omitempty"`
	// EIPs are the packaged EIPs the node carries and limits, by address
	// (at most 4096; EIPsLeftOut counts the others).
	EIPs        map[string]BandwidthEIP `json:"eips,omitempty"`
	EIPsLeftOut int                     `json:"eips_left_out,omitempty"`
}

// BandwidthEIP is one packaged EIP's limit on a node.
type BandwidthEIP struct {
	Package string `json:"package"`
	Mode    string `json:"mode"`  // "managed" or "static"
	Limit   uint64 `json:"limit"` // bit/s
	Burst   uint32 `json:"burst"` // bytes
	// What the limit dropped since the EIP took its stats slot.
	DroppedPackets uint64 `json:"dropped_packets"`
	DroppedBytes   uint64 `json:"dropped_bytes"`
	// Rate is the last measured rate, bit/s (absent: not measured).
	Rate *uint64 `json:"rate,omitempty"`
}
