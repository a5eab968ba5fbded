package dataplane

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// ConnOccupancy is the connection table's entries grouped by VIP
// (the entry's destination address) and by backend slot, with the
// total and the table's capacity.
type ConnOccupancy struct {
	Total, Capacity uint32 // the IPv4 flows' table (lb_conns)
	// Total6 and Capacity6: the IPv6 VIPs' flows' table (lb_conns6),
	// whose entries ByVIP and ByBackend count too.
	Total6, Capacity6 uint32
	ByVIP             map[netip.Addr]uint32
	ByBackend         map[uint32]uint32 // backend slot (Conn.Backend)
}

// occBatch is the entries one BatchLookup reads: 4096 keys and values of
// 16 + 16 bytes, 128 KiB of buffers.
const occBatch = 4096

// ConnOccupancy walks the connection table once in batches (one system
// call per occBatch entries; no lock of the caller's is needed: the
// data plane keeps writing meanwhile, so the counts are a walk's, not an
// instant's: an entry added or removed during the walk may be counted or
// not, and a hash table resized under the walk is not, BPF hash maps
// being of fixed size). Meant for a periodic walk (every 10-30 s), not
// for every scrape: BenchmarkConnOccupancy gives its cost per entry.
func (e *Edge) ConnOccupancy() (ConnOccupancy, error) {
	o := ConnOccupancy{Capacity: e.objs.LbConns.MaxEntries(), ByVIP: map[netip.Addr]uint32{}, ByBackend: map[uint32]uint32{}}
	keys := make([]edgeCtKey, occBatch)
	vals := make([]edgeCtEntry, occBatch)
	// Counted by the raw key word and the backend's 16-bit slot (a
	// slice: no hashing per entry), named at the end.
	byDst := map[uint32]uint32{}
	byBackend := make([]uint32, 1<<16)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			byDst[keys[i].Dst]++
			byBackend[vals[i].Backend]++
		}
		o.Total += uint32(n)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return o, fmt.Errorf("connection table walk: %w", err)
		}
		if err != nil {
			break
		}
	}
	for d, n := range byDst {
		o.ByVIP[wordIP4(d)] = n
	}
	// The IPv6 VIPs' table (far smaller buffers: 40-byte keys).
	o.Capacity6 = e.objs.LbConns6.MaxEntries()
	keys6 := make([]edgeCtKey6, occBatch/4)
	vals6 := make([]edgeCtEntry, occBatch/4)
	var cursor6 ebpf.MapBatchCursor
	for {
		n, err := e.objs.LbConns6.BatchLookup(&cursor6, keys6, vals6, nil)
		for i := 0; i < n; i++ {
			o.ByVIP[addrFrom(keys6[i].Dst, 10)]++
			byBackend[vals6[i].Backend]++
		}
		o.Total6 += uint32(n)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return o, fmt.Errorf("IPv6 connection table walk: %w", err)
		}
		if err != nil {
			break
		}
	}
	for b, n := range byBackend {
		if n > 0 {
			o.ByBackend[uint32(b)] = n
		}
	}
	return o, nil
}
