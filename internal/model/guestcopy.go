package model

import (
	"net/netip"
	"strings"
)

// KindGuestCopy is the kind of the guest copies in edge set scopes
// (internal/placement, docs/scale.md "Scopes"). It is no API kind and the
// State holds none: the controller derives a copy from a host for every
// guest that an EIP carried by the set is bound to, or that backs a
// service the set carries, and writes it in the set's scope only. An edge
// routes to a guest with the copy alone (the host's underlay, the guest's
// address and VSID), so its share holds the guests its set routes to, not
// whole hosts with every guest they run.
const KindGuestCopy = "guests"

// GuestCopy is one guest of a host as a set's edges need it.
type GuestCopy struct {
	Host     string     `json:"host"`
	Underlay netip.Addr `json:"underlay"`
	Guest    Guest      `json:"guest"`
}

// GuestCopyKey is the key of host's guest's copy: "HOST/GUEST" (names
// hold no slash).
func GuestCopyKey(host, guest string) string { return host + "/" + guest }

// SplitGuestCopyKey splits a guest copy's key into host and guest names.
func SplitGuestCopyKey(key string) (host, guest string, ok bool) {
	host, guest, ok = strings.Cut(key, "/")
	return host, guest, ok && host != "" && guest != ""
}

// NewGuestCopy is the copy of guest g of host h.
func NewGuestCopy(h *Host, g Guest) *GuestCopy {
	return &GuestCopy{Host: h.Name, Underlay: h.Underlay, Guest: g}
}

// Key is "HOST/GUEST".
func (c *GuestCopy) Key() string { return GuestCopyKey(c.Host, c.Guest.Name) }

// Validate checks the copy as Host.Validate checks a host and its guest.
func (c *GuestCopy) Validate() Errors {
	var es Errors
	checkName(&es, "host", c.Host)
	checkUnderlay(&es, "underlay", c.Underlay)
	checkName(&es, "guest.name", c.Guest.Name)
	checkUnicast4(&es, "guest.address", c.Guest.Address)
	if c.Guest.Address6.IsValid() {
		checkPrivate6(&es, "guest.address6", c.Guest.Address6)
	}
	if g := c.Guest; g.VSID < VSIDMin || g.VSID > VSIDMax {
		es.add("guest.vsid", "%d is outside %d-%d (RFC 7637 reserves the rest)", g.VSID, VSIDMin, VSIDMax)
	}
	return es
}

// decodeGuestCopy is DecodeStored's decoding of a guest copy.
func decodeGuestCopy(data []byte) (Object, error) {
	var c GuestCopy
	if err := strictJSON(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}
