//go:build !node

package main

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// checkListens checks a repeatable --listen (gslb, pathd): each HOST:PORT,
// none twice, and none that another already takes. A wildcard binds every
// address of its port: [::]:P (or :P) both families, as Go's socket is
// dual-stack, and 0.0.0.0:P every IPv4 one; a specific address of that
// port beside it would fail at bind time, so say so before.
func checkListens(flag string, addrs []string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("%s: at least one address", flag)
	}
	var seen []listenAddr
	for i, l := range addrs {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			return fmt.Errorf("%s %q: %w", flag, l, err)
		}
		if slices.Contains(addrs[:i], l) {
			return fmt.Errorf("%s %q: given twice", flag, l)
		}
		a, _ := netip.ParseAddr(host)
		cur := listenAddr{host, port, a}
		for j, o := range seen {
			if o.port == port && port != "0" && (o.covers(cur) || cur.covers(o)) {
				return fmt.Errorf("%s %q and %q: a wildcard takes every address of its port in its family ([::]:%s alone serves both families)", flag, addrs[j], l, port)
			}
		}
		seen = append(seen, cur)
	}
	return nil
}

type listenAddr struct {
	host, port string
	addr       netip.Addr // invalid: a name or the empty host
}

// covers reports whether w is a wildcard that takes o's address too.
func (w listenAddr) covers(o listenAddr) bool {
	switch {
	case w.host == "" || w.addr == netip.IPv6Unspecified():
		return true
	case w.addr == netip.IPv4Unspecified():
		return o.host == "" || o.addr.Unmap().Is4() || o.addr == netip.IPv6Unspecified()
	}
	return false
}
