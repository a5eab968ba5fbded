package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"

	"github.com/azgate/azgate/internal/fwplan"
)

// FirewallMaps is the edge's firewall (bpf/lib/fw.h; the Edge, the
// FakeEdge and FaultyFirewall implement it): the reconciler applies the
// diff of two plans (internal/fwplan) and reads the per-rule counters.
type FirewallMaps interface {
	// ApplyFirewall writes a diff: counters of fresh rules zeroed, then
	// entries, destinations and the global flags put, then what went
	// away deleted (with Prune, whatever the plan does not hold).
	ApplyFirewall(fwplan.Diff) error
	// FirewallStats reads one rule's counters (fwplan.Plan.Slots).
	FirewallStats(idx uint32) (Count, error)
}

// Firewall flags (bpf/lib/consts.h FW_C_*).
const (
	fwCGlobal  = 1 << 24
	fwCPrivate = 1 << 25
)

func fwKeyTo(k fwplan.Key) (edgeFwKey, error) {
	if !k.Source.Addr().Is4() {
		return edgeFwKey{}, fmt.Errorf("firewall source %v: not IPv4", k.Source)
	}
	if k.Scope > fwplan.ScopeMax {
		return edgeFwKey{}, fmt.Errorf("firewall scope %d above %d", k.Scope, fwplan.ScopeMax)
	}
	b := k.Source.Masked().Addr().As4()
	return edgeFwKey{Prefixlen: 32 + uint32(k.Source.Bits()), Scope: k.Scope, Saddr: binary.LittleEndian.Uint32(b[:])}, nil
}

func fwKeyFrom(k edgeFwKey) fwplan.Key {
	return fwplan.Key{Scope: k.Scope, Source: netip.PrefixFrom(netip.AddrFrom4(le4(k.Saddr)), int(k.Prefixlen)-32)}
}

// fwKey6To is fwKeyTo for an IPv6 source (fw_rules6).
func fwKey6To(k fwplan.Key) (edgeFwKey6, error) {
	a := k.Source.Addr()
	if !plain6(a) {
		return edgeFwKey6{}, fmt.Errorf("firewall source %v: not IPv6", k.Source)
	}
	if k.Scope > fwplan.ScopeMax {
		return edgeFwKey6{}, fmt.Errorf("firewall scope %d above %d", k.Scope, fwplan.ScopeMax)
	}
	ip, _, _ := addrTo(k.Source.Masked().Addr())
	return edgeFwKey6{Prefixlen: 32 + uint32(k.Source.Bits()), Scope: k.Scope, Saddr: ip}, nil
}

func fwKey6From(k edgeFwKey6) fwplan.Key {
	return fwplan.Key{Scope: k.Scope, Source: netip.PrefixFrom(addrFrom(k.Saddr, 10), int(k.Prefixlen)-32)}
}

func fwEntryTo(e fwplan.Entry) edgeFwEntry {
	var v edgeFwEntry
	v.N = uint32(e.N)
	for i := 0; i < e.N && i < len(v.R); i++ {
		r := e.Refs[i]
		v.R[i].Rule, v.R[i].Action, v.R[i].Proto, v.R[i].PortLo, v.R[i].PortHi = r.Rule, r.Action, r.Proto, r.PortLo, r.PortHi
	}
	return v
}

func fwDestTo(d fwplan.Dest) edgeFwDst {
	v := edgeFwDst{Scope: d.Scope, Nlens: d.NLens, Lens: d.Lens}
	if d.Global {
		v.Flags |= fwCGlobal
	}
	if d.Private {
		v.Flags |= fwCPrivate
	}
	return v
}

func addr4Key(a netip.Addr) (uint32, error) {
	if !a.Is4() {
		return 0, fmt.Errorf("firewall destination %v: not IPv4", a)
	}
	b := a.As4()
	return binary.LittleEndian.Uint32(b[:]), nil
}

// fw6 reports whether a key, or a destination, is of the IPv6 maps.
func fw6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

// needV6 fails when the program has no IPv6 firewall maps (an older
// object) and something IPv6 is to be written.
func (e *Edge) needV6(what string, a any) error {
	if e.objs.FwRules6 == nil || e.objs.FwDst6 == nil {
		return fmt.Errorf("firewall %s %v: this program has no IPv6 firewall (fw_rules6, fw_dst6)", what, a)
	}
	return nil
}

// putFwEntry writes one entry into the trie of its source's family.
func (e *Edge) putFwEntry(k fwplan.Key, v fwplan.Entry) error {
	mv := fwEntryTo(v)
	if fw6(k.Source.Addr()) {
		if err := e.needV6("source", k.Source); err != nil {
			return err
		}
		mk, err := fwKey6To(k)
		if err != nil {
			return err
		}
		return e.objs.FwRules6.Update(&mk, &mv, ebpf.UpdateAny)
	}
	mk, err := fwKeyTo(k)
	if err != nil {
		return err
	}
	return e.objs.FwRules.Update(&mk, &mv, ebpf.UpdateAny)
}

func (e *Edge) delFwEntry(k fwplan.Key) error {
	var err error
	if fw6(k.Source.Addr()) {
		if e.objs.FwRules6 == nil {
			return nil
		}
		mk, kerr := fwKey6To(k)
		if kerr != nil {
			return kerr
		}
		err = e.objs.FwRules6.Delete(&mk)
	} else {
		mk, kerr := fwKeyTo(k)
		if kerr != nil {
			return kerr
		}
		err = e.objs.FwRules.Delete(&mk)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

func (e *Edge) putFwDest(a netip.Addr, v fwplan.Dest) error {
	mv := fwDestTo(v)
	if fw6(a) {
		if err := e.needV6("destination", a); err != nil {
			return err
		}
		ip, _, _ := addrTo(a)
		return e.objs.FwDst6.Update(&ip, &mv, ebpf.UpdateAny)
	}
	mk, err := addr4Key(a)
	if err != nil {
		return err
	}
	return e.objs.FwDst.Update(mk, &mv, ebpf.UpdateAny)
}

func (e *Edge) delFwDest(a netip.Addr) error {
	var err error
	if fw6(a) {
		if e.objs.FwDst6 == nil {
			return nil
		}
		ip, _, _ := addrTo(a)
		err = e.objs.FwDst6.Delete(&ip)
	} else {
		mk, kerr := addr4Key(a)
		if kerr != nil {
			return kerr
		}
		err = e.objs.FwDst.Delete(mk)
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}

// ApplyFirewall writes a firewall diff. The route cache copies each
// destination's scope and flags (eip_centry.fw) and the verdict cache
// keeps verdicts (fw_vcache): the route generation is bumped after every
// write, so no slot of either keeps what the write changed.
func (e *Edge) ApplyFirewall(d fwplan.Diff) (err error) {
	// The route generation also invalidates the verdict cache
	// (fw_vcache): bumped after every firewall write.
	defer e.routesWritten(&err)
	zero := make([]edgeFwStats, ebpf.MustPossibleCPU())
	for _, i := range d.Fresh {
		if err := e.objs.FwStats.Update(i, zero, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("reset firewall counters %d: %w", i, err)
		}
	}
	// The Bloom filter's new bits first, then the entries: a destination
	// is pointed at a scope once the scope's rules are there and
	// findable.
	for i, add := range d.BloomOr {
		var w uint64
		if err := e.objs.FwBloom.Lookup(i, &w); err != nil {
			return fmt.Errorf("read firewall filter word %d: %w", i, err)
		}
		if err := e.objs.FwBloom.Update(i, w|add, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write firewall filter word %d: %w", i, err)
		}
	}
	for k, v := range d.PutEntries {
		if err := e.putFwEntry(k, v); err != nil {
			return fmt.Errorf("write firewall entry %d/%v: %w", k.Scope, k.Source, err)
		}
	}
	for a, v := range d.PutDests {
		if err := e.putFwDest(a, v); err != nil {
			return fmt.Errorf("write firewall destination %v: %w", a, err)
		}
	}
	if d.GlobalDirty {
		mv := fwDestTo(d.Global)
		if err := e.objs.FwGlobal.Update(uint32(0), &mv, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write firewall global flags: %w", err)
		}
	}
	for _, a := range d.DelDests {
		if err := e.delFwDest(a); err != nil {
			return fmt.Errorf("delete firewall destination %v: %w", a, err)
		}
	}
	for _, k := range d.DelEntries {
		if err := e.delFwEntry(k); err != nil {
			return fmt.Errorf("delete firewall entry %d/%v: %w", k.Scope, k.Source, err)
		}
	}
	for i, w := range d.BloomSet {
		if err := e.objs.FwBloom.Update(i, w, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("write firewall filter word %d: %w", i, err)
		}
	}
	if d.Prune && d.Want != nil {
		if d.BloomAll {
			for i, w := range d.Want.Bloom {
				if err := e.objs.FwBloom.Update(uint32(i), w, ebpf.UpdateAny); err != nil {
					return fmt.Errorf("write firewall filter word %d: %w", i, err)
				}
			}
		}
		if err := deleteStale[edgeFwKey, edgeFwEntry](e.objs.FwRules, func(k edgeFwKey) bool {
			_, ok := d.Want.Entries[fwKeyFrom(k)]
			return ok
		}); err != nil {
			return err
		}
		if err := deleteStale[uint32, edgeFwDst](e.objs.FwDst, func(k uint32) bool {
			_, ok := d.Want.Dests[netip.AddrFrom4(le4(k))]
			return ok
		}); err != nil {
			return err
		}
		if e.objs.FwRules6 != nil {
			if err := deleteStale[edgeFwKey6, edgeFwEntry](e.objs.FwRules6, func(k edgeFwKey6) bool {
				_, ok := d.Want.Entries[fwKey6From(k)]
				return ok
			}); err != nil {
				return err
			}
		}
		if e.objs.FwDst6 != nil {
			if err := deleteStale[edgeIpAddr, edgeFwDst](e.objs.FwDst6, func(k edgeIpAddr) bool {
				_, ok := d.Want.Dests[addrFrom(k, 10)]
				return ok
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// FirewallStats reads one rule's counters, summed over CPUs.
func (e *Edge) FirewallStats(idx uint32) (Count, error) {
	var vals []edgeFwStats
	if err := e.objs.FwStats.Lookup(idx, &vals); err != nil {
		return Count{}, fmt.Errorf("read firewall counters %d: %w", idx, err)
	}
	var c Count
	for _, v := range vals {
		c.Packets += v.Packets
		c.Bytes += v.Bytes
	}
	return c, nil
}

var _ FirewallMaps = (*Edge)(nil)

// FakeFirewall is an in-memory FirewallMaps: the FakeEdge embeds one.
type FakeFirewall struct {
	FWEntries map[fwplan.Key]fwplan.Entry
	FWDests   map[netip.Addr]fwplan.Dest
	FWGlobal  fwplan.Dest
	FWStats   map[uint32]Count
	FWBloom   map[uint32]uint64
	// FWApplied counts ApplyFirewall calls that changed something.
	FWApplied int
}

// ApplyFirewall applies a diff to the fake's maps.
func (f *FakeFirewall) ApplyFirewall(d fwplan.Diff) error {
	if f.FWEntries == nil {
		f.FWEntries, f.FWDests, f.FWStats = map[fwplan.Key]fwplan.Entry{}, map[netip.Addr]fwplan.Dest{}, map[uint32]Count{}
		f.FWBloom = map[uint32]uint64{}
	}
	if d.Empty() {
		return nil
	}
	f.FWApplied++
	for _, i := range d.Fresh {
		delete(f.FWStats, i)
	}
	for i, add := range d.BloomOr {
		f.FWBloom[i] |= add
	}
	for k, v := range d.PutEntries {
		f.FWEntries[k] = v
	}
	for a, v := range d.PutDests {
		f.FWDests[a] = v
	}
	if d.GlobalDirty {
		f.FWGlobal = d.Global
	}
	for _, a := range d.DelDests {
		delete(f.FWDests, a)
	}
	for _, k := range d.DelEntries {
		delete(f.FWEntries, k)
	}
	for i, w := range d.BloomSet {
		f.FWBloom[i] = w
	}
	if d.Prune && d.Want != nil {
		if d.BloomAll {
			clear(f.FWBloom)
			for i, w := range d.Want.Bloom {
				if w != 0 {
					f.FWBloom[uint32(i)] = w
				}
			}
		}
		for k := range f.FWEntries {
			if _, ok := d.Want.Entries[k]; !ok {
				delete(f.FWEntries, k)
			}
		}
		for a := range f.FWDests {
			if _, ok := d.Want.Dests[a]; !ok {
				delete(f.FWDests, a)
			}
		}
	}
	return nil
}

// FirewallStats reads a rule's counters (tests set FWStats).
func (f *FakeFirewall) FirewallStats(idx uint32) (Count, error) { return f.FWStats[idx], nil }

// FaultyFirewall injects failures into a FirewallMaps.
type FaultyFirewall struct {
	FirewallMaps
	F *Faults
}

func (f FaultyFirewall) ApplyFirewall(d fwplan.Diff) error {
	return f.F.write("ApplyFirewall", func() error { return f.FirewallMaps.ApplyFirewall(d) })
}
func (f FaultyFirewall) FirewallStats(idx uint32) (Count, error) {
	if err := f.F.check("FirewallStats", false); err != nil {
		return Count{}, err
	}
	return f.FirewallMaps.FirewallStats(idx)
}
