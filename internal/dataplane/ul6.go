package dataplane

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
)

// The IPv6 underlay (bpf/lib/consts.h UL6_HOST). The edge's maps name a
// host by its IPv4 underlay address in a 4-byte field (eip_routes'
// host.a[0] and its caches, eip_prev, drift_flows, lb_backend.addr); a
// host with an IPv6 underlay address is named there by the IPv4 address
// 0.0.0.0/8 + i, its name, which ul6_hosts maps both ways: name (in a[0])
// -> address, for the encapsulation, and address -> name, for the NVGRE
// it sends. 0.0.0.0/8 is never a host's underlay address (the model
// refuses it), so the IPv4 entries keep their size and meaning.

// Ul6HostsMax is UL6_HOSTS_MAX: the names (index 0 is never one:
// 0.0.0.0 means no host); ul6_hosts holds two entries a host.
const Ul6HostsMax = 16384

// ul6Names is the edge's side of ul6_hosts: the names it
// gave, read back from the maps on first use (a restarted daemon keeps
// the names the pinned routes hold). A name is never given to another
// address while the maps live: an address that comes back gets its old
// name, and the table holds Ul6HostsMax - 1 addresses in all.
type ul6Names struct {
	mu     sync.Mutex
	loaded bool
	byAddr map[netip.Addr]uint32 // address -> index
	byIdx  map[uint32]netip.Addr
	next   uint32
}

// isUl6Name says whether w, an IPv4 address as a map holds it (network
// order in memory), names an IPv6 host (0.0.0.0/8, not 0).
func isUl6Name(w uint32) bool { return w != 0 && w&0xff == 0 }

// ul6Word is the map word of index i: 0.i>>16.i>>8.i in network order.
func ul6Word(i uint32) uint32 {
	return ip4word(netip.AddrFrom4([4]byte{0, byte(i >> 16), byte(i >> 8), byte(i)}))
}

func ul6Index(w uint32) uint32 {
	b := wordIP4(w).As4()
	return uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// validUl6 says whether a may be a host's IPv6 underlay address: a plain
// (not IPv4-mapped, unzoned) global unicast address, fc00::/7 included.
func validUl6(a netip.Addr) bool {
	return a.Is6() && !a.Is4In6() && a.Zone() == "" && a.IsGlobalUnicast()
}

func (e *Edge) ul6Load() error {
	n := &e.ul6
	if n.loaded {
		return nil
	}
	n.byAddr, n.byIdx, n.next = map[netip.Addr]uint32{}, map[uint32]netip.Addr{}, 1
	if e.objs.Ul6Hosts == nil {
		n.loaded = true
		return nil
	}
	var k, v edgeIpAddr
	it := e.objs.Ul6Hosts.Iterate()
	for it.Next(&k, &v) {
		if !isUl6Name(k.A[0]) || k.A[1]|k.A[2]|k.A[3] != 0 {
			continue // an address -> name entry: its name's is read
		}
		a := addrFrom(v, 10)
		i := ul6Index(k.A[0])
		n.byAddr[a], n.byIdx[i] = i, a
		n.next = max(n.next, i+1)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read ul6_hosts: %w", err)
	}
	n.loaded = true
	return nil
}

// ul6Name is the map word naming the IPv6 host a, given on first use
// (ul6_hosts: name -> address, then address -> name).
func (e *Edge) ul6Name(a netip.Addr) (uint32, error) {
	if !validUl6(a) {
		return 0, fmt.Errorf("underlay %v: not a global unicast IPv6 address", a)
	}
	if e.objs.Ul6Hosts == nil {
		return 0, fmt.Errorf("underlay %v: this edge program has no IPv6 underlay (ul6_hosts)", a)
	}
	e.ul6.mu.Lock()
	defer e.ul6.mu.Unlock()
	if err := e.ul6Load(); err != nil {
		return 0, err
	}
	n := &e.ul6
	if i, ok := n.byAddr[a]; ok {
		return ul6Word(i), nil
	}
	if n.next >= Ul6HostsMax {
		return 0, fmt.Errorf("underlay %v: the IPv6 underlay hosts' table is full (%d)", a, Ul6HostsMax-1)
	}
	i := n.next
	v, _, _ := addrTo(a)
	var k edgeIpAddr
	w := ul6Word(i)
	k.A[0] = w
	if err := e.objs.Ul6Hosts.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("write ul6_hosts: %w", err)
	}
	if err := e.objs.Ul6Hosts.Update(&v, &k, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("write ul6_hosts: %w", err)
	}
	n.next++
	n.byAddr[a], n.byIdx[i] = i, a
	return w, nil
}

// hostWord is the map word naming host h (IPv4: its address; IPv6: its
// ul6Name).
func (e *Edge) hostWord(h netip.Addr) (uint32, error) {
	if h.Is4() {
		if isUl6Name(ip4word(h)) {
			return 0, fmt.Errorf("underlay %v: 0.0.0.0/8 is no host's address", h)
		}
		return ip4word(h), nil
	}
	return e.ul6Name(h)
}

// hostAddr is the host a map word names (the zero Addr for a name no
// address has).
func (e *Edge) hostAddr(w uint32) netip.Addr {
	if !isUl6Name(w) {
		return wordIP4(w)
	}
	e.ul6.mu.Lock()
	defer e.ul6.mu.Unlock()
	if err := e.ul6Load(); err != nil {
		return netip.Addr{}
	}
	if a, ok := e.ul6.byIdx[ul6Index(w)]; ok {
		return a
	}
	// Another daemon's name since our load: read the slot.
	var k, v edgeIpAddr
	k.A[0] = w
	if e.objs.Ul6Hosts == nil || e.objs.Ul6Hosts.Lookup(&k, &v) != nil {
		return netip.Addr{}
	}
	a := addrFrom(v, 10)
	if !validUl6(a) {
		return netip.Addr{}
	}
	return a
}

// Ul6Hosts lists the IPv6 underlay hosts' names the edge gave (index ->
// address), for tests and diagnostics.
func (e *Edge) Ul6Hosts() (map[uint32]netip.Addr, error) {
	e.ul6.mu.Lock()
	defer e.ul6.mu.Unlock()
	if err := e.ul6Load(); err != nil {
		return nil, err
	}
	out := make(map[uint32]netip.Addr, len(e.ul6.byIdx))
	for i, a := range e.ul6.byIdx {
		out[i] = a
	}
	return out, nil
}

// pinnedHostOf is hostAddr for the pinned maps in pinDir (ul6_hosts read
// on demand; a name it cannot read is the zero Addr).
func pinnedHostOf(pinDir string) func(uint32) netip.Addr {
	return func(w uint32) netip.Addr {
		if !isUl6Name(w) {
			return wordIP4(w)
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(pinDir, edgeMapUl6Hosts), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return netip.Addr{}
		}
		defer m.Close()
		var k, v edgeIpAddr
		k.A[0] = w
		if m.Lookup(&k, &v) != nil {
			return netip.Addr{}
		}
		if a := addrFrom(v, 10); validUl6(a) {
			return a
		}
		return netip.Addr{}
	}
}
