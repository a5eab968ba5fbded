package model

import (
	"net/netip"
	"strings"
	"time"
)

// RatesRoot is the etcd prefix under which edges publish the per-EIP
// traffic rates they measure, one key per edge:
//
//	/azgate/ddos/rates/EDGE
//
// The value is a RateReport in JSON, written with a lease of the edge's
// own (DefaultRateReportTTL), so the report of an edge that is gone
// vanishes. An edge writes only the EIPs whose rates exceed its reporting
// floor, at most its top-N by packet rate, and deletes its key when none
// does: an idle region writes nothing. The controller's DDoS detection
// (internal/ddos) sums an EIP's rates over every edge that reports it,
// since the upstream routers' ECMP spreads an EIP's traffic over the
// edges of its set.
const RatesRoot = "/azgate/ddos/rates/"

// DefaultRateReportTTL is the lease TTL of the edges' rate reports.
const DefaultRateReportTTL = 3 * time.Second

// RateReportKey is the key of one edge's rate report.
func RateReportKey(edge string) string { return RatesRoot + edge }

// ParseRateReportKey returns the edge a rate report key names.
func ParseRateReportKey(k string) (edge string, ok bool) {
	edge, found := strings.CutPrefix(k, RatesRoot)
	if !found || edge == "" || strings.Contains(edge, "/") {
		return "", false
	}
	return edge, true
}

// RateReport is one edge's measured per-EIP rates over its last interval.
type RateReport struct {
	// IntervalMS is the measuring interval in milliseconds.
	IntervalMS int64 `json:"intervalMs"`
	// At is when the interval ended (the edge's clock).
	At time.Time `json:"at"`
	// Rates of the EIPs above the floor, highest packet rate first.
	Rates []EIPRate `json:"rates"`
	// Omitted counts the EIPs above the floor left out by the top-N bound.
	Omitted int `json:"omitted,omitempty"`
}

// EIPRate is one EIP's rates from the Internet side: packets, bits and
// TCP SYNs (without ACK) per second.
type EIPRate struct {
	Address netip.Addr `json:"address"`
	PPS     float64    `json:"pps"`
	BPS     float64    `json:"bps"`
	SYNPS   float64    `json:"synps"`
}

// DDoSEvent is one decision of the controller's DDoS detection, served
// by GET /v1/ddos/events.
type DDoSEvent struct {
	// Seq numbers the events of one controller run, from 1.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Action: "quarantine" (the address was moved to the quarantine set),
	// "release" (the automatic quarantine was lifted), or "skip" (a
	// decision that could not be carried out, Reason says why).
	Action  string     `json:"action"`
	Address netip.Addr `json:"address"`
	// The rates summed over the edges at the decision, and the levels they
	// were compared with (the trigger levels for a quarantine, the release
	// marks for a release).
	PPS       float64 `json:"pps"`
	BPS       float64 `json:"bps"`
	SYNPS     float64 `json:"synps"`
	LimitPPS  float64 `json:"limitPps"`
	LimitBPS  float64 `json:"limitBps"`
	LimitSYNS float64 `json:"limitSynps"`
	// Edges is how many edges reported the address.
	Edges int `json:"edges,omitempty"`
	// Reason says it in words, the figures included (also the quarantine
	// object's reason).
	Reason string `json:"reason"`
}
