package model

import (
	"net/netip"
	"time"
)

// BGPStatus is what an edge's BGP speaker reports in its NodeStatus: its
// sessions to the upstream routers, the prefixes it advertises and, when
// it advertises none, why (docs/bgp.md).
type BGPStatus struct {
	RouterID string       `json:"router_id,omitempty"`
	ASN      uint32       `json:"asn,omitempty"`
	Sessions []BGPSession `json:"sessions"`
	// Advertised are the prefixes the speaker currently offers its peers.
	Advertised []string `json:"advertised"`
	// Announcing is true when every condition holds and the edge
	// advertises its set's prefixes.
	Announcing bool `json:"announcing"`
	// Failing names the conditions that keep the edge from announcing
	// (for example "drained", "store", "dataplane", "maps").
	Failing []string `json:"failing,omitempty"`
}

// BGPSession is one configured peer as the speaker sees it.
type BGPSession struct {
	Peer  string `json:"peer"` // the peer's address
	ASN   uint32 `json:"asn"`
	State string `json:"state"` // "established", "active", "connect", "idle", ...
	// Since is when the session last reached Established (zero if never).
	Since      time.Time `json:"since,omitzero"`
	Received   uint64    `json:"received"`   // prefixes received from the peer (all rejected)
	Advertised uint64    `json:"advertised"` // prefixes advertised to the peer
}

// Announcement is what an edge writes, with a short lease, while it
// announces its set's routes: the agents pick the set's live members
// from these (store.AnnounceKey).
type Announcement struct {
	Set      string         `json:"set"`
	Edge     string         `json:"edge"`
	Underlay netip.Addr     `json:"underlay"`
	Prefixes []netip.Prefix `json:"prefixes"`
	Since    time.Time      `json:"since"` // when the edge started announcing
}
