package dnsserver

import (
	"net/netip"
	"sync/atomic"

	"github.com/azgate/azgate/internal/geo"
)

// countingLocator is TEST CODE: it wraps a real geo.Locator (a
// geo.PrefixMap in these tests) and counts the lookups, so a test can check
// that answers which do not depend on location cost no lookup.
type countingLocator struct {
	geo.Locator
	calls atomic.Int64
}

func (l *countingLocator) Locate(a netip.Addr) (geo.Location, bool) {
	l.calls.Add(1)
	return l.Locator.Locate(a)
}

// testHealth is TEST CODE: a Health with a set of down VIPs.
type testHealth map[netip.Addr]bool

func (h testHealth) Up(a netip.Addr) bool { return !h[a] }
