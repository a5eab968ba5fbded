package dataplane

// Upgrades with pinned state (docs/upgrades.md).
//
// Every pinned map carries a layout: its shape as the kernel holds it (type,
// key size, value size, max entries, flags, and the inner map's shape for a
// map of maps) and a meaning version (mapMeaning below) that developers bump
// when the bytes of a map mean something else without its size changing.
// The layouts are recorded in one more pinned map, azg_layout, in the same
// pin directory: a pinned map lives and dies with the pins it describes (a
// reboot or dataplane-reset removes both at once), where a file elsewhere
// could outlive them or describe another node's pins. bpffs holds no
// regular files, so a file "next to the pins" is not possible there.
// azg_layout is the loader's bookkeeping and is never read by a program, so
// it is not in bpf/lib/maps.h: the objects, of this release and of earlier
// ones, hold only the maps their programs use.
//
// On load each pinned map of the new objects is compared with its pin:
// equal layouts are reused; a shape that changed in a way with a known
// conversion (a value grown at its end, new bytes zeroed; another capacity;
// other flags) is migrated: a new map is made and filled from the old one,
// the programs are swapped on every pinned link with BPF_F_REPLACE naming
// the old program (the kernel swaps atomically: no packet goes unprocessed,
// and a concurrent loader's swap is not overwritten), entries the old
// program made meanwhile are copied once more, and only then is the new map
// pinned under the name (a rename over the old pin). A map whose meaning
// version changed, or whose shape changed with no conversion, is never
// reused: by its class (mapClasses) it starts empty and is counted, or the
// load is refused before anything changed (the running program keeps
// forwarding on its maps).

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// mapMeaning is the meaning version of each pinned map: bump a map's entry
// when the bytes it holds change meaning without the map's shape changing
// (a field reinterpreted, two fields swapped, a unit changed), and write
// its conversion in mapConversions if one is possible. Growing a value
// with new fields at its end, zero meaning "none", needs no bump: the old
// bytes keep their meaning and the loader zero-fills the new ones. A map
// not listed is at version 1, as every map was when versions began (the
// pins of a release before them are read as version 1).
var mapMeaning = map[string]uint32{
	// 2: the value is a struct local_allow (rules), where a __u32 1
	// meant "to the kernel, anything"; config: the agent rewrites it.
	"agent_local": 2,
	// 2: the key is (host, VSID, guest as a 16-byte address), IPv4 and
	// IPv6 guests (it was host, guest, VSID, IPv4 only); config: the edge
	// rewrites it with its health-check targets.
	"hc_peers": 2,
}

// MapClass says what an upgrade does with a pinned map it cannot migrate
// (meaning changed, or a shape with no conversion: another type or key
// size, a shrunk value).
type MapClass int

const (
	// ClassConfig maps are written by the daemon from the store (routes,
	// services, settings): they start empty and the reconciler rewrites
	// them.
	ClassConfig MapClass = iota
	// ClassCounters maps start at zero, as after a reboot.
	ClassCounters
	// ClassConnections maps (the edge's connection table) start empty:
	// existing connections are hashed again by Maglev (the same backend
	// while the pool is unchanged) and connection sync refills them from
	// the set's peers.
	ClassConnections
	// ClassRequired maps hold state whose loss breaks established flows
	// with no way to rebuild it: the load is refused unless the operator
	// allows the loss (LoadOptions.AllowDrop).
	ClassRequired
)

func (c MapClass) String() string {
	return [...]string{"config", "counters", "connections", "required"}[c]
}

// mapClasses: the class of each pinned map not of ClassConfig.
var mapClasses = map[string]MapClass{
	"stats":       ClassCounters,
	"eip_stats":   ClassCounters,
	"lb_be_stats": ClassCounters,
	"lb_info":     ClassCounters,
	"hc_stats":    ClassCounters,
	"lb_conns":    ClassConnections,
	// The IPv6 VIPs' connection table: the same as lb_conns (was
	// ClassConfig by omission: the same outcome, an empty table, but a
	// connection table is no configuration the reconciler rewrites).
	"lb_conns6": ClassConnections,
	// A drifting EIP's flows recorded at their SYN: without them their
	// next segments go to the previous binding until the drift ends.
	"drift_flows": ClassConnections,
	// A nat connection's reply tuple -> its VIP and port: without it the
	// replies of a backend serving two VIPs or ports leave untranslated.
	"lb_nat_conns": ClassRequired,
	// The same for IPv6 VIPs' nat connections.
	"lb_nat_conns6": ClassRequired,
	// The agent's VIP flows: without them replies leave with the guest's
	// own address.
	"agent_flows": ClassRequired,
	// The same for flows through an IPv6 VIP.
	"agent_flows6": ClassRequired,
}

// dropTogether: maps that only make sense with each other; when one starts
// empty the others do too (lb_table_owner records which pool each
// lb_tables slot holds: kept alone it would name tables that are gone).
var dropTogether = [][]string{{"lb_tables", "lb_table_owner"}}

// MapLayout is what an upgrade compares between a pinned map and the new
// objects' definition of it.
type MapLayout struct {
	Type                                  ebpf.MapType
	KeySize, ValueSize, MaxEntries, Flags uint32
	// The inner map's shape (maps of maps; zero otherwise).
	InnerType                                          ebpf.MapType
	InnerKeySize, InnerValueSize, InnerMax, InnerFlags uint32
	// Meaning is the map's meaning version (mapMeaning).
	Meaning uint32
}

func (l MapLayout) shape() string {
	s := fmt.Sprintf("%v key %d value %d max %d flags %#x", l.Type, l.KeySize, l.ValueSize, l.MaxEntries, l.Flags)
	if l.InnerType != 0 {
		s += fmt.Sprintf(" inner (%v key %d value %d max %d flags %#x)", l.InnerType, l.InnerKeySize, l.InnerValueSize, l.InnerMax, l.InnerFlags)
	}
	return s
}

func (l MapLayout) String() string { return fmt.Sprintf("%s meaning %d", l.shape(), l.Meaning) }

func meaningOf(name string) uint32 {
	if v, ok := mapMeaning[name]; ok {
		return v
	}
	return 1
}

func classOf(name string) MapClass { return mapClasses[name] }

// layoutOfSpec is the layout the new objects want for a map.
func layoutOfSpec(name string, ms *ebpf.MapSpec) MapLayout {
	l := MapLayout{Type: ms.Type, KeySize: ms.KeySize, ValueSize: ms.ValueSize, MaxEntries: ms.MaxEntries, Flags: ms.Flags, Meaning: meaningOf(name)}
	if in := ms.InnerMap; in != nil {
		l.InnerType, l.InnerKeySize, l.InnerValueSize, l.InnerMax, l.InnerFlags = in.Type, in.KeySize, in.ValueSize, in.MaxEntries, in.Flags
	}
	return l
}

// layoutRecord is azg_layout's value (format 1): MapLayout as fixed fields.
type layoutRecord struct {
	Format                                uint32
	Type                                  uint32
	KeySize, ValueSize, MaxEntries, Flags uint32
	InnerType                             uint32
	InnerKeySize, InnerValueSize          uint32
	InnerMax, InnerFlags                  uint32
	Meaning                               uint32
}

const layoutFormat = 1

// layoutMapName is the pin of the layout records in a pin directory.
const layoutMapName = "azg_layout"

func layoutKey(name string) [32]byte {
	var k [32]byte
	copy(k[:], name)
	return k
}

func (r layoutRecord) layout() MapLayout {
	return MapLayout{Type: ebpf.MapType(r.Type), KeySize: r.KeySize, ValueSize: r.ValueSize, MaxEntries: r.MaxEntries, Flags: r.Flags,
		InnerType: ebpf.MapType(r.InnerType), InnerKeySize: r.InnerKeySize, InnerValueSize: r.InnerValueSize, InnerMax: r.InnerMax,
		InnerFlags: r.InnerFlags, Meaning: r.Meaning}
}

func recordOf(l MapLayout) layoutRecord {
	return layoutRecord{Format: layoutFormat, Type: uint32(l.Type), KeySize: l.KeySize, ValueSize: l.ValueSize, MaxEntries: l.MaxEntries,
		Flags: l.Flags, InnerType: uint32(l.InnerType), InnerKeySize: l.InnerKeySize, InnerValueSize: l.InnerValueSize,
		InnerMax: l.InnerMax, InnerFlags: l.InnerFlags, Meaning: l.Meaning}
}

var layoutSpec = ebpf.MapSpec{
	Name:       layoutMapName,
	Type:       ebpf.Hash,
	KeySize:    32,
	ValueSize:  uint32(4 * 12),
	MaxEntries: 1024,
}

// openLayouts opens (or makes and pins) the pin directory's layout records.
func openLayouts(pinDir string) (*ebpf.Map, error) {
	path := filepath.Join(pinDir, layoutMapName)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err == nil {
		if m.Type() != layoutSpec.Type || m.KeySize() != layoutSpec.KeySize || m.ValueSize() != layoutSpec.ValueSize {
			m.Close()
			return nil, fmt.Errorf("%s: an unknown format of layout records (a newer release's?): roll back to it, or remove the pins (azgate dataplane-reset)", path)
		}
		return m, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	spec := layoutSpec
	m, err = ebpf.NewMap(&spec)
	if err != nil {
		return nil, fmt.Errorf("make %s: %w", path, err)
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, nil
}

// MapAction is what a load did with one pinned map.
type MapAction string

const (
	ActionReuse   MapAction = "reused"   // same layout: the pinned map as it is
	ActionCreate  MapAction = "created"  // no pin yet: a new, empty map
	ActionMigrate MapAction = "migrated" // copied into a new map of the new layout
	ActionDrop    MapAction = "dropped"  // not trusted: a new, empty map
)

// MapUpgrade reports one pinned map's fate in a load.
type MapUpgrade struct {
	Name     string
	Class    MapClass
	Action   MapAction
	Old, New MapLayout
	// Why: for a migration or a drop, what changed.
	Why string
	// Copied entries; Lost: those the new map had no room for (a smaller
	// capacity) or the kernel refused.
	Copied, Lost int
	// CaughtUp: entries the old program made between the copy and the swap,
	// copied after it.
	CaughtUp int
}

// UpgradeReport is what a load did with the pinned maps (empty without
// pins). The daemons log it; docs/upgrades.md explains each action.
type UpgradeReport struct {
	Maps []MapUpgrade
	// Swapped: the pinned links (links/IFNAME, tc/IFNAME) moved to the new
	// programs by this load, when a map was migrated or dropped; SwapTook
	// the time the swaps took together.
	Swapped  []string
	SwapTook time.Duration
}

// Changed lists the maps not reused.
func (r UpgradeReport) Changed() []MapUpgrade {
	var out []MapUpgrade
	for _, m := range r.Maps {
		if m.Action == ActionMigrate || m.Action == ActionDrop {
			out = append(out, m)
		}
	}
	return out
}

// upgrade is one load's plan and the handles it holds until finish.
type upgrade struct {
	pinDir  string
	layouts *ebpf.Map
	report  UpgradeReport
	// pinned: old pinned maps by name (reused ones too), closed by close.
	pinned map[string]*ebpf.Map
	// fresh: new maps by name, pinned by finish (created, migrated, dropped).
	fresh map[string]*ebpf.Map
	want  map[string]MapLayout
}

// ErrUpgradeRefused is returned (wrapped) when a load would drop a map of
// ClassRequired; nothing was changed.
var ErrUpgradeRefused = errors.New("upgrade refused")

// beginLoad prepares loading spec with o: without a pin directory nothing
// is pinned; with one, each pinned-by-name map is reused, migrated,
// dropped or created (see the top of this file) and handed to the loader
// as a replacement. The caller loads, then calls finish (or close on
// failure).
func beginLoad(spec *ebpf.CollectionSpec, o LoadOptions) (*upgrade, *ebpf.CollectionOptions, error) {
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{}}
	u := &upgrade{pinDir: o.PinDir, pinned: map[string]*ebpf.Map{}, fresh: map[string]*ebpf.Map{}, want: map[string]MapLayout{}}
	if o.PinDir == "" {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
		return u, opts, nil
	}
	if err := EnsureBPFFS(); err != nil {
		return nil, nil, err
	}
	for _, d := range []string{"links", "tc"} {
		if err := os.MkdirAll(filepath.Join(o.PinDir, d), 0o700); err != nil {
			return nil, nil, fmt.Errorf("pin dir: %w", err)
		}
	}
	var err error
	if u.layouts, err = openLayouts(o.PinDir); err != nil {
		return nil, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			u.close()
		}
	}()
	names := make([]string, 0, len(spec.Maps))
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinByName {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	plan := map[string]*MapUpgrade{}
	for _, name := range names {
		ms := spec.Maps[name]
		want := layoutOfSpec(name, ms)
		u.want[name] = want
		mu := &MapUpgrade{Name: name, Class: classOf(name), New: want}
		plan[name] = mu
		old, err := ebpf.LoadPinnedMap(filepath.Join(o.PinDir, name), nil)
		if errors.Is(err, os.ErrNotExist) {
			mu.Action = ActionCreate
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		u.pinned[name] = old
		mu.Old, err = u.pinnedLayout(name, old, want)
		if err != nil {
			return nil, nil, err
		}
		mu.Action, mu.Why = decide(mu.Old, want)
	}
	// A map that starts empty takes the maps it only makes sense with.
	for _, group := range dropTogether {
		dropped := ""
		for _, n := range group {
			if p := plan[n]; p != nil && p.Action == ActionDrop {
				dropped = n
			}
		}
		for _, n := range group {
			if p := plan[n]; p != nil && dropped != "" && (p.Action == ActionReuse || p.Action == ActionMigrate) {
				p.Action, p.Why = ActionDrop, "dropped with "+dropped
			}
		}
	}
	// Refuse before anything is made.
	var refused []string
	for _, name := range names {
		p := plan[name]
		if p.Action == ActionDrop && p.Class == ClassRequired && !allowDrop(o.AllowDrop, name) {
			refused = append(refused, fmt.Sprintf("%s (%s)", name, p.Why))
		}
	}
	if len(refused) > 0 {
		return nil, nil, fmt.Errorf("%w in %s: %s would start empty, breaking the flows it holds; "+
			"the running data plane is unchanged. Roll back, or allow the loss (--upgrade-allow-drop=NAME)",
			ErrUpgradeRefused, o.PinDir, strings.Join(refused, ", "))
	}
	for _, name := range names {
		p := plan[name]
		ms := spec.Maps[name]
		switch p.Action {
		case ActionReuse:
			opts.MapReplacements[name] = u.pinned[name]
		default:
			nm, err := newMapFrom(ms)
			if err != nil {
				return nil, nil, fmt.Errorf("make map %s (%s): %w", name, p.New.shape(), err)
			}
			u.fresh[name] = nm
			opts.MapReplacements[name] = nm
			if p.Action == ActionMigrate {
				p.Copied, p.Lost, err = copyEntries(u.pinned[name], nm, p.Old, p.New, ebpf.UpdateAny)
				if err != nil {
					return nil, nil, fmt.Errorf("migrate map %s (%s): %w", name, p.Why, err)
				}
			}
		}
		u.report.Maps = append(u.report.Maps, *p)
	}
	for _, ms := range spec.Maps {
		ms.Pinning = ebpf.PinNone // every pinned map is a replacement now
	}
	ok = true
	return u, opts, nil
}

func allowDrop(allow []string, name string) bool {
	return slices.Contains(allow, name) || slices.Contains(allow, "all")
}

func newMapFrom(ms *ebpf.MapSpec) (*ebpf.Map, error) {
	c := ms.Copy()
	c.Pinning = ebpf.PinNone
	return ebpf.NewMap(c)
}

// pinnedLayout is the layout of a pinned map: its shape as the kernel
// reports it, the inner shape and meaning from its record. Pins without a
// record are a release's before layout versions: meaning 1, and the inner
// shape of the new definition (the kernel refuses a copy of an inner map
// that does not fit, and the map is then dropped by its class).
func (u *upgrade) pinnedLayout(name string, m *ebpf.Map, want MapLayout) (MapLayout, error) {
	info, err := m.Info()
	if err != nil {
		return MapLayout{}, fmt.Errorf("pinned map %s: %w", name, err)
	}
	l := MapLayout{Type: info.Type, KeySize: info.KeySize, ValueSize: info.ValueSize, MaxEntries: info.MaxEntries, Flags: info.Flags}
	var rec layoutRecord
	k := layoutKey(name)
	switch err := u.layouts.Lookup(&k, &rec); {
	case err == nil:
		if rec.Format != layoutFormat {
			return MapLayout{}, fmt.Errorf("pinned map %s: layout record of format %d, this release reads %d: roll back, or remove the pins (azgate dataplane-reset)", name, rec.Format, layoutFormat)
		}
		r := rec.layout()
		l.Meaning = r.Meaning
		l.InnerType, l.InnerKeySize, l.InnerValueSize, l.InnerMax, l.InnerFlags = r.InnerType, r.InnerKeySize, r.InnerValueSize, r.InnerMax, r.InnerFlags
	case errors.Is(err, ebpf.ErrKeyNotExist):
		l.Meaning = 1
		l.InnerType, l.InnerKeySize, l.InnerValueSize, l.InnerMax, l.InnerFlags = want.InnerType, want.InnerKeySize, want.InnerValueSize, want.InnerMax, want.InnerFlags
	default:
		return MapLayout{}, fmt.Errorf("layout record of %s: %w", name, err)
	}
	return l, nil
}

// decide compares a pinned map's layout with the wanted one.
func decide(old, want MapLayout) (MapAction, string) {
	if old == want {
		return ActionReuse, ""
	}
	if old.Meaning != want.Meaning {
		return ActionDrop, fmt.Sprintf("meaning version %d -> %d", old.Meaning, want.Meaning)
	}
	var why []string
	switch {
	case old.Type != want.Type:
		return ActionDrop, fmt.Sprintf("type %v -> %v", old.Type, want.Type)
	case old.KeySize != want.KeySize:
		return ActionDrop, fmt.Sprintf("key size %d -> %d", old.KeySize, want.KeySize)
	case old.ValueSize > want.ValueSize:
		return ActionDrop, fmt.Sprintf("value shrank %d -> %d bytes", old.ValueSize, want.ValueSize)
	case old.InnerType != want.InnerType || old.InnerKeySize != want.InnerKeySize || old.InnerValueSize != want.InnerValueSize ||
		old.InnerMax != want.InnerMax || old.InnerFlags != want.InnerFlags:
		// Inner maps are shared by reference, not copied: a new inner
		// shape cannot hold the old ones.
		return ActionDrop, fmt.Sprintf("inner map %s -> %s", old.shape(), want.shape())
	}
	if old.ValueSize != want.ValueSize {
		why = append(why, fmt.Sprintf("value grew %d -> %d bytes (new bytes zeroed)", old.ValueSize, want.ValueSize))
	}
	if old.MaxEntries != want.MaxEntries {
		why = append(why, fmt.Sprintf("max entries %d -> %d", old.MaxEntries, want.MaxEntries))
	}
	if old.Flags != want.Flags {
		why = append(why, fmt.Sprintf("flags %#x -> %#x", old.Flags, want.Flags))
	}
	return ActionMigrate, strings.Join(why, ", ")
}

func perCPU(t ebpf.MapType) bool {
	return t == ebpf.PerCPUHash || t == ebpf.PerCPUArray || t == ebpf.LRUCPUHash || t == ebpf.PerCPUCGroupStorage
}

func isMapOfMaps(t ebpf.MapType) bool { return t == ebpf.ArrayOfMaps || t == ebpf.HashOfMaps }

func isArray(t ebpf.MapType) bool {
	return t == ebpf.Array || t == ebpf.PerCPUArray || t == ebpf.ArrayOfMaps
}

// copyEntries copies every entry of old into nw, each value zero-extended
// from old's size to nw's, with flags (UpdateAny for the migration,
// UpdateNoExist for the catch-up after the swap, which must not undo what
// the new program wrote). Entries nw refuses (no room) are counted as lost.
// The walk is bounded: an LRU table that churns while it is read can make
// the kernel restart the walk.
func copyEntries(old, nw *ebpf.Map, ol, nl MapLayout, flags ebpf.MapUpdateFlags) (copied, lost int, err error) {
	if (ol.Type == ebpf.Hash || ol.Type == ebpf.LRUHash) && flags == ebpf.UpdateAny {
		if copied, lost, err = copyBatched(old, nw, ol, nl); err == nil {
			return copied, lost, nil
		}
		// A kernel or map without batch operations: one entry at a time
		// (again from the start; UpdateAny makes the repeat harmless).
	}
	ncpu := 1
	if perCPU(ol.Type) {
		if ncpu, err = ebpf.PossibleCPU(); err != nil {
			return 0, 0, err
		}
	}
	stride := (int(ol.ValueSize) + 7) &^ 7
	limit := 2*int(ol.MaxEntries) + 16
	var key []byte
	for i := 0; i < limit; i++ {
		var next []byte
		if key == nil {
			next, err = old.NextKeyBytes(nil)
		} else {
			next, err = old.NextKeyBytes(key)
		}
		if err != nil {
			return copied, lost, fmt.Errorf("walk: %w", err)
		}
		if next == nil {
			return copied, lost, nil
		}
		key = next
		raw, err := old.LookupBytes(key)
		if err != nil {
			return copied, lost, fmt.Errorf("read %x: %w", key, err)
		}
		if raw == nil {
			continue // deleted meanwhile
		}
		var uerr error
		switch {
		case isMapOfMaps(ol.Type):
			id := ebpf.MapID(uint32(raw[0]) | uint32(raw[1])<<8 | uint32(raw[2])<<16 | uint32(raw[3])<<24)
			inner, err := ebpf.NewMapFromID(id)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				return copied, lost, fmt.Errorf("inner map %d: %w", id, err)
			}
			uerr = nw.Update(key, inner, flags)
			inner.Close()
		case perCPU(ol.Type):
			vals := make([][]byte, ncpu)
			for c := range vals {
				v := make([]byte, nl.ValueSize)
				copy(v, raw[c*stride:c*stride+int(ol.ValueSize)])
				vals[c] = v
			}
			uerr = nw.Update(key, vals, flags)
		default:
			v := make([]byte, nl.ValueSize)
			copy(v, raw[:ol.ValueSize])
			uerr = nw.Update(key, v, flags)
		}
		switch {
		case uerr == nil:
			copied++
		case flags == ebpf.UpdateNoExist && errors.Is(uerr, ebpf.ErrKeyExist):
		case errors.Is(uerr, unix.E2BIG) || errors.Is(uerr, ebpf.ErrKeyNotExist) || errors.Is(uerr, unix.ENOMEM):
			lost++ // no room: a smaller capacity
		default:
			return copied, lost, fmt.Errorf("write %x: %w", key, uerr)
		}
	}
	return copied, lost, nil
}

// progsOf collects the programs of a bpf2go objects struct by their
// names (the ebpf tags).
func progsOf(objs any) map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			switch {
			case f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(v.Field(i))
			case f.Type == reflect.TypeOf((*ebpf.Program)(nil)):
				if p, _ := v.Field(i).Interface().(*ebpf.Program); p != nil {
					out[f.Tag.Get("ebpf")] = p
				}
			}
		}
	}
	walk(reflect.ValueOf(objs).Elem())
	return out
}

// copyBatched is copyEntries for the big hash tables (connection tables):
// batches of 4096 entries, three syscalls per batch where the walk takes
// three per entry. Keys and values are byte arrays of the maps' sizes.
func copyBatched(old, nw *ebpf.Map, ol, nl MapLayout) (copied, lost int, err error) {
	const batch = 4096
	kt := reflect.ArrayOf(int(ol.KeySize), reflect.TypeOf(byte(0)))
	ovt := reflect.ArrayOf(int(ol.ValueSize), reflect.TypeOf(byte(0)))
	nvt := reflect.ArrayOf(int(nl.ValueSize), reflect.TypeOf(byte(0)))
	keys := reflect.MakeSlice(reflect.SliceOf(kt), batch, batch)
	vals := reflect.MakeSlice(reflect.SliceOf(ovt), batch, batch)
	nvals := reflect.MakeSlice(reflect.SliceOf(nvt), batch, batch)
	var cursor ebpf.MapBatchCursor
	for {
		n, lerr := old.BatchLookup(&cursor, keys.Interface(), vals.Interface(), nil)
		if lerr != nil && !errors.Is(lerr, ebpf.ErrKeyNotExist) {
			return copied, lost, lerr
		}
		if n > 0 {
			for i := 0; i < n; i++ {
				nv := nvals.Index(i)
				nv.SetZero()
				reflect.Copy(nv.Slice(0, int(ol.ValueSize)), vals.Index(i).Slice(0, int(ol.ValueSize)))
			}
			k, v := keys.Slice(0, n).Interface(), nvals.Slice(0, n).Interface()
			done, uerr := nw.BatchUpdate(k, v, nil)
			copied += done
			if uerr != nil {
				if errors.Is(uerr, unix.E2BIG) || errors.Is(uerr, unix.ENOMEM) {
					lost += n - done // no room: a smaller capacity
				} else {
					return copied, lost, uerr
				}
			}
		}
		if errors.Is(lerr, ebpf.ErrKeyNotExist) {
			return copied, lost, nil
		}
	}
}

// matchProgram matches a running program to the new objects' program of
// the same name (the kernel keeps the first 15 characters; cilium/ebpf
// reads the full name from the program's BTF when it has it).
func matchProgram(kernelName string, progs map[string]*ebpf.Program) *ebpf.Program {
	for name, p := range progs {
		n := name
		if len(n) > 15 {
			n = n[:15]
		}
		if n == kernelName || name == kernelName {
			return p
		}
	}
	return nil
}

type linkSwap struct {
	pin  string
	l    link.Link
	old  *ebpf.Program
	prog *ebpf.Program
}

// finish completes a load: when a map was migrated or dropped and pinned
// links run the old programs, every link is swapped to the new program of
// the same name (atomically, expecting the old one); the old program's
// last entries are copied; the new maps are pinned under their names and
// the layouts recorded. progs are the new objects' programs by name.
func (u *upgrade) finish(progs map[string]*ebpf.Program) (UpgradeReport, error) {
	defer u.close()
	if u.pinDir == "" {
		return u.report, nil
	}
	changed := len(u.report.Changed()) > 0
	if changed {
		swaps, err := u.planSwaps(progs)
		if err != nil {
			return u.report, err
		}
		start := time.Now()
		for i, s := range swaps {
			rl, ok := s.l.(interface {
				UpdateArgs(link.RawLinkUpdateOptions) error
			})
			var err error
			if ok {
				err = rl.UpdateArgs(link.RawLinkUpdateOptions{New: s.prog, Old: s.old, Flags: unix.BPF_F_REPLACE})
			} else {
				err = s.l.Update(s.prog)
			}
			if err != nil {
				// The links swapped so far run the new program on the new
				// (unpinned) maps: put them back.
				for _, b := range swaps[:i] {
					if rl, ok := b.l.(interface {
						UpdateArgs(link.RawLinkUpdateOptions) error
					}); ok {
						rl.UpdateArgs(link.RawLinkUpdateOptions{New: b.old, Old: b.prog, Flags: unix.BPF_F_REPLACE})
					}
				}
				closeSwaps(swaps)
				return u.report, fmt.Errorf("swap the program of %s: %w (the old programs and maps stay)", s.pin, err)
			}
			u.report.Swapped = append(u.report.Swapped, s.pin)
		}
		u.report.SwapTook = time.Since(start)
		closeSwaps(swaps)
		// Entries the old program made between the copy and the swap.
		for i := range u.report.Maps {
			mu := &u.report.Maps[i]
			if mu.Action != ActionMigrate || isArray(mu.Old.Type) {
				continue
			}
			n, _, err := copyEntries(u.pinned[mu.Name], u.fresh[mu.Name], mu.Old, mu.New, ebpf.UpdateNoExist)
			if err != nil {
				return u.report, fmt.Errorf("catch up map %s: %w", mu.Name, err)
			}
			mu.CaughtUp = n
		}
	}
	for _, mu := range u.report.Maps {
		if m := u.fresh[mu.Name]; m != nil {
			final := filepath.Join(u.pinDir, mu.Name)
			// bpffs refuses names with a dot; map names have no dash.
			tmp := filepath.Join(u.pinDir, "upgrade-"+mu.Name)
			os.Remove(tmp)
			if err := m.Pin(tmp); err != nil {
				return u.report, fmt.Errorf("pin map %s: %w", mu.Name, err)
			}
			if err := os.Rename(tmp, final); err != nil { // replaces the old pin at once
				os.Remove(tmp)
				return u.report, fmt.Errorf("pin map %s: %w", mu.Name, err)
			}
		}
		k := layoutKey(mu.Name)
		rec := recordOf(mu.New)
		if err := u.layouts.Update(&k, &rec, ebpf.UpdateAny); err != nil {
			return u.report, fmt.Errorf("record the layout of %s: %w", mu.Name, err)
		}
	}
	return u.report, nil
}

// planSwaps pairs every pinned link with the new program replacing its
// program, before any swap: a link whose program the new objects do not
// have would keep the old maps in use, and the upgrade is refused.
func (u *upgrade) planSwaps(progs map[string]*ebpf.Program) ([]linkSwap, error) {
	var swaps []linkSwap
	for _, dir := range []string{"links", "tc"} {
		ents, _ := os.ReadDir(filepath.Join(u.pinDir, dir))
		for _, e := range ents {
			pin := filepath.Join(u.pinDir, dir, e.Name())
			l, err := link.LoadPinnedLink(pin, nil)
			if err != nil {
				closeSwaps(swaps)
				return nil, fmt.Errorf("pinned link %s: %w", pin, err)
			}
			s, err := pairLink(pin, l, progs)
			if err != nil {
				l.Close()
				closeSwaps(swaps)
				return nil, err
			}
			swaps = append(swaps, s)
		}
	}
	return swaps, nil
}

func pairLink(pin string, l link.Link, progs map[string]*ebpf.Program) (linkSwap, error) {
	info, err := l.Info()
	if err != nil {
		return linkSwap{}, fmt.Errorf("pinned link %s: %w", pin, err)
	}
	old, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return linkSwap{}, fmt.Errorf("program of pinned link %s: %w", pin, err)
	}
	pi, err := old.Info()
	if err != nil {
		old.Close()
		return linkSwap{}, fmt.Errorf("program of pinned link %s: %w", pin, err)
	}
	p := matchProgram(pi.Name, progs)
	if p == nil {
		old.Close()
		return linkSwap{}, fmt.Errorf("%w: pinned link %s runs %q, which the new objects do not have", ErrUpgradeRefused, pin, pi.Name)
	}
	return linkSwap{pin: pin, l: l, old: old, prog: p}, nil
}

func closeSwaps(swaps []linkSwap) {
	for _, s := range swaps {
		s.l.Close()
		s.old.Close()
	}
}

// close releases the handles the load held; pinned and loaded maps stay.
func (u *upgrade) close() {
	for _, m := range u.pinned {
		m.Close()
	}
	for _, m := range u.fresh {
		m.Close()
	}
	u.pinned, u.fresh = map[string]*ebpf.Map{}, map[string]*ebpf.Map{}
	if u.layouts != nil {
		u.layouts.Close()
		u.layouts = nil
	}
}

// mapsOnly: a load without programs (LoadEdgeMaps) may not migrate maps a
// running program holds: it could not swap the program.
func (u *upgrade) refuseIfLinked() error {
	if u.pinDir == "" || len(u.report.Changed()) == 0 {
		return nil
	}
	for _, dir := range []string{"links", "tc"} {
		if ents, _ := os.ReadDir(filepath.Join(u.pinDir, dir)); len(ents) > 0 {
			return fmt.Errorf("%w: maps %v need migrating while a program runs on them; load the full data plane to upgrade", ErrUpgradeRefused, namesOf(u.report.Changed()))
		}
	}
	return nil
}

func namesOf(ms []MapUpgrade) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// loadInto loads spec and fills objs (a bpf2go objects struct) by the
// ebpf tags. Unlike LoadAndAssign, a program, map or variable the spec
// lacks is left nil: an earlier release's object (the upgrade test's
// running data plane) loads into this release's struct; the methods using
// a map it did not have check for nil or are not called on it.
func loadInto(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, objs any) error {
	coll, err := ebpf.NewCollectionWithOptions(spec, *opts)
	if err != nil {
		return err
	}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("ebpf")
			switch {
			case f.Anonymous && f.Type.Kind() == reflect.Struct:
				walk(v.Field(i))
			case f.Type == reflect.TypeOf((*ebpf.Program)(nil)):
				if p := coll.Programs[tag]; p != nil {
					v.Field(i).Set(reflect.ValueOf(p))
					delete(coll.Programs, tag)
				}
			case f.Type == reflect.TypeOf((*ebpf.Map)(nil)):
				if m := coll.Maps[tag]; m != nil {
					v.Field(i).Set(reflect.ValueOf(m))
					delete(coll.Maps, tag)
				}
			case f.Type == reflect.TypeOf((*ebpf.Variable)(nil)):
				if x := coll.Variables[tag]; x != nil {
					v.Field(i).Set(reflect.ValueOf(x))
				}
			}
		}
	}
	walk(reflect.ValueOf(objs).Elem())
	coll.Close() // what objs did not take (.bss and the like stay held by the programs)
	return nil
}

// Log writes what the load did with the pinned maps: one line per map
// migrated (info) or dropped (warning: its state was not trusted and starts
// empty), and the swap.
func (r UpgradeReport) Log(log *slog.Logger) {
	changed := r.Changed()
	if len(changed) == 0 {
		return
	}
	for _, m := range changed {
		args := []any{"map", m.Name, "class", m.Class.String(), "why", m.Why, "from", m.Old.String(), "to", m.New.String()}
		if m.Action == ActionMigrate {
			log.Info("data plane upgrade: map migrated", append(args, "copied", m.Copied, "lost", m.Lost, "caught_up", m.CaughtUp)...)
		} else {
			log.Warn("data plane upgrade: map not trusted, starts empty", args...)
		}
	}
	log.Info("data plane upgrade: programs swapped", "links", r.Swapped, "took", r.SwapTook, "maps_changed", len(changed))
}
