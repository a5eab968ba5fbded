package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
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

// ul6Names is a program's side of its ul6_hosts map (the edge's IPv6
// underlay hosts, the agent's IPv6 underlay edges: the same map and the
// same names, bpf/lib/maps.h): the names it gave, read back from the map
// on first use (a restarted daemon keeps the names the pinned entries
// hold). A name is given to another address only when no fresh index is
// left (after Ul6HostsMax - 1 addresses in all) and then one collected
// (forget) long ago: a stale reference to a collected name is as rare as
// that.
type ul6Names struct {
	mu     sync.Mutex
	loaded bool
	m      *ebpf.Map             // ul6_hosts (nil: the program has none)
	peer   string                // what a name names, for errors: "host", "edge"
	byAddr map[netip.Addr]uint32 // address -> index
	byIdx  map[uint32]netip.Addr
	free   []uint32 // indexes forget collected, oldest first
	next   uint32
}

// load reads the map's names once (n.mu held).
func (n *ul6Names) load() error {
	if n.loaded {
		return nil
	}
	n.byAddr, n.byIdx, n.next, n.free = map[netip.Addr]uint32{}, map[uint32]netip.Addr{}, 1, nil
	if n.m == nil {
		n.loaded = true
		return nil
	}
	var k, v edgeIpAddr
	it := n.m.Iterate()
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
	for i := uint32(1); i < n.next; i++ {
		if _, ok := n.byIdx[i]; !ok {
			n.free = append(n.free, i)
		}
	}
	n.loaded = true
	return nil
}

// name is the map word naming the IPv6 peer a, given on first use
// (ul6_hosts: name -> address, then address -> name).
func (n *ul6Names) name(a netip.Addr) (uint32, error) {
	if !validUl6(a) {
		return 0, fmt.Errorf("underlay %v: not a global unicast IPv6 address", a)
	}
	if n.m == nil {
		return 0, fmt.Errorf("underlay %v: this %s program has no IPv6 underlay (ul6_hosts)", a, n.peer)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.load(); err != nil {
		return 0, err
	}
	if i, ok := n.byAddr[a]; ok {
		return ul6Word(i), nil
	}
	i := n.next
	if i >= Ul6HostsMax {
		if len(n.free) == 0 {
			return 0, fmt.Errorf("underlay %v: the IPv6 underlay %ss' table is full (%d)", a, n.peer, Ul6HostsMax-1)
		}
		i = n.free[0]
	}
	v, _, _ := addrTo(a)
	var k edgeIpAddr
	w := ul6Word(i)
	k.A[0] = w
	if err := n.m.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("write ul6_hosts: %w", err)
	}
	if err := n.m.Update(&v, &k, ebpf.UpdateAny); err != nil {
		return 0, fmt.Errorf("write ul6_hosts: %w", err)
	}
	if i == n.next {
		n.next++
	} else {
		n.free = n.free[1:]
	}
	n.byAddr[a], n.byIdx[i] = i, a
	return w, nil
}

// forget collects the names of the addresses keep refuses: both their
// entries deleted (a full table refused the next address before), the
// index free for reuse once no fresh one is left.
func (n *ul6Names) forget(keep func(netip.Addr) bool) error {
	if n.m == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.load(); err != nil {
		return err
	}
	var gone []uint32
	for i, a := range n.byIdx {
		if !keep(a) {
			gone = append(gone, i)
		}
	}
	slices.Sort(gone)
	for _, i := range gone {
		a := n.byIdx[i]
		v, _, _ := addrTo(a)
		var k edgeIpAddr
		k.A[0] = ul6Word(i)
		if err := n.m.Delete(&v); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete ul6_hosts %v: %w", a, err)
		}
		if err := n.m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete ul6_hosts %v: %w", a, err)
		}
		delete(n.byIdx, i)
		delete(n.byAddr, a)
		n.free = append(n.free, i)
	}
	return nil
}

// addr is the peer a map word names (the zero Addr for a name no
// address has); an IPv4 word is its address.
func (n *ul6Names) addr(w uint32) netip.Addr {
	if !isUl6Name(w) {
		return wordIP4(w)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.load(); err != nil {
		return netip.Addr{}
	}
	if a, ok := n.byIdx[ul6Index(w)]; ok {
		return a
	}
	// Another daemon's name since our load: read the slot.
	var k, v edgeIpAddr
	k.A[0] = w
	if n.m == nil || n.m.Lookup(&k, &v) != nil {
		return netip.Addr{}
	}
	a := addrFrom(v, 10)
	if !validUl6(a) {
		return netip.Addr{}
	}
	return a
}

// list is the names given (index -> address).
func (n *ul6Names) list() (map[uint32]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.load(); err != nil {
		return nil, err
	}
	out := make(map[uint32]netip.Addr, len(n.byIdx))
	for i, a := range n.byIdx {
		out[i] = a
	}
	return out, nil
}

// word is the map word naming peer h (IPv4: its address, never one of
// 0.0.0.0/8; IPv6: its name).
func (n *ul6Names) word(h netip.Addr) (uint32, error) {
	if h.Is4() {
		if isUl6Name(ip4word(h)) || ip4word(h) == 0 {
			return 0, fmt.Errorf("underlay %v: 0.0.0.0/8 is no %s's address", h, n.peer)
		}
		return ip4word(h), nil
	}
	return n.name(h)
}

// names is the edge's ul6Names over its ul6_hosts.
func (e *Edge) names() *ul6Names {
	e.ul6Once.Do(func() { e.ul6.m, e.ul6.peer = e.objs.Ul6Hosts, "host" })
	return &e.ul6
}

func (e *Edge) ul6Name(a netip.Addr) (uint32, error) { return e.names().name(a) }

// hostWord is the map word naming host h (IPv4: its address; IPv6: its
// ul6Name).
func (e *Edge) hostWord(h netip.Addr) (uint32, error) {
	if h.Is4() && !isUl6Name(ip4word(h)) {
		return ip4word(h), nil
	}
	return e.names().word(h)
}

// hostAddr is the host a map word names (the zero Addr for a name no
// address has).
func (e *Edge) hostAddr(w uint32) netip.Addr {
	return e.names().addr(w)
}

// ForgetUl6Hosts collects the names of the IPv6 hosts keep refuses (the
// edge reconciler's, once no route, previous binding or backend names
// them): a full table refused the next host before.
func (e *Edge) ForgetUl6Hosts(keep func(netip.Addr) bool) error { return e.names().forget(keep) }

var _ Ul6HostMaps = (*Edge)(nil)

// Ul6Hosts lists the IPv6 underlay hosts' names the edge gave (index ->
// address), for tests and diagnostics.
func (e *Edge) Ul6Hosts() (map[uint32]netip.Addr, error) {
	return e.names().list()
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
