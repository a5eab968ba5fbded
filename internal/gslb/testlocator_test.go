package gslb

import (
	"net/netip"
	"sync"
)

// testPrefixLocator is TEST CODE: a tiny longest-prefix-match Locator so
// the handler's tests do not depend on the geo helper's branch. The real
// MaxMind and prefix-map Locators live in the geo package.
type testPrefixLocator struct {
	entries []testLocEntry
	// missBits is the Bits reported for an address in no prefix.
	missBits4, missBits6 int

	mu    sync.Mutex
	calls int
}

type testLocEntry struct {
	prefix netip.Prefix
	loc    Location
}

func (l *testPrefixLocator) Locate(a netip.Addr) Location {
	l.mu.Lock()
	l.calls++
	l.mu.Unlock()
	best := -1
	var out Location
	for _, e := range l.entries {
		if e.prefix.Contains(a) && e.prefix.Bits() > best {
			best = e.prefix.Bits()
			out = e.loc
			out.Found = true
			out.Bits = best
		}
	}
	if best < 0 {
		out.Bits = l.missBits4
		if a.Is6() {
			out.Bits = l.missBits6
		}
	}
	return out
}

// testHealth is TEST CODE: a Health with a set of down VIPs.
type testHealth map[netip.Addr]bool

func (h testHealth) Up(a netip.Addr) bool { return !h[a] }
