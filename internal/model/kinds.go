package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The registry of object kinds. Everything the model, the State, the store
// and the client need to know about a kind is one entry of registry: its
// name (the path segment of its API and store keys), how it is named in
// messages, whether users write it, where the State keeps it and the State's
// referential checks and indexes for it. Adding a kind is one entry here
// plus the kind's own file (its type, validation and state hooks); nothing
// else switches on kinds.
//
// The order is the dependency order: an object only refers to kinds before
// it, so a document is applied, and a store loaded, in this order.
var registry = []kindDef{
	&kindOf[AZ, *AZ]{
		name: KindAZ, singular: "AZ", user: true,
		field:       func(s *State) *map[string]*AZ { return &s.AZs },
		checkDelete: (*State).checkDeleteAZ,
	},
	&kindOf[Host, *Host]{
		name: KindHost, singular: "host", user: true,
		field:       func(s *State) *map[string]*Host { return &s.Hosts },
		check:       (*State).checkHost,
		index:       (*State).indexHost,
		checkDelete: (*State).checkDeleteHost,
	},
	&kindOf[EdgeSet, *EdgeSet]{
		name: KindEdgeSet, singular: "edge set", user: true,
		field:       func(s *State) *map[string]*EdgeSet { return &s.EdgeSets },
		check:       (*State).checkEdgeSet,
		index:       (*State).indexEdges,
		afterPut:    (*State).afterPutEdgeSet,
		checkDelete: (*State).checkDeleteEdgeSet,
		afterDelete: (*State).afterDeleteEdgeSet,
	},
	&kindOf[EIP, *EIP]{
		name: KindEIP, singular: "EIP", user: true,
		field:       func(s *State) *map[string]*EIP { return &s.EIPs },
		less:        func(a, b *EIP) bool { return a.Address.Less(b.Address) },
		check:       (*State).checkEIP,
		index:       (*State).indexEIP,
		checkDelete: (*State).checkDeleteEIP,
	},
	&kindOf[Service, *Service]{
		name: KindService, singular: "service", user: true,
		field:       func(s *State) *map[string]*Service { return &s.Services },
		check:       (*State).checkService,
		index:       (*State).indexService,
		checkDelete: (*State).checkDeleteService,
	},
	&kindOf[Quarantine, *Quarantine]{
		name: KindQuarantine, singular: "quarantine", user: true,
		field: func(s *State) *map[string]*Quarantine { return &s.Quarantines },
		less:  func(a, b *Quarantine) bool { return a.Address.Less(b.Address) },
		check: (*State).checkQuarantine,
	},
	&kindOf[FirewallRule, *FirewallRule]{
		name: KindFirewallRule, singular: "firewall rule", user: true,
		field: func(s *State) *map[string]*FirewallRule { return &s.FirewallRules },
		check: (*State).checkFirewallRule,
	},
	&kindOf[BandwidthPackage, *BandwidthPackage]{
		name: KindBandwidthPackage, singular: "bandwidth package", user: true,
		field: func(s *State) *map[string]*BandwidthPackage { return &s.BandwidthPackages },
		check: (*State).checkBandwidthPackage,
		index: (*State).indexBandwidthPackage,
	},
	&kindOf[DDoSPolicy, *DDoSPolicy]{
		name: KindDDoSPolicy, singular: "DDoS policy", user: true,
		field: func(s *State) *map[string]*DDoSPolicy { return &s.DDoSPolicies },
		check: (*State).checkDDoSPolicy,
	},
	&kindOf[DNSZone, *DNSZone]{
		name: KindDNSZone, singular: "DNS zone", user: true,
		field:       func(s *State) *map[string]*DNSZone { return &s.DNSZones },
		check:       (*State).checkDNSZone,
		checkDelete: (*State).checkDeleteDNSZone,
	},
	&kindOf[GSLBRecord, *GSLBRecord]{
		name: KindGSLBRecord, singular: "GSLB record", user: true,
		field: func(s *State) *map[string]*GSLBRecord { return &s.GSLBRecords },
		check: (*State).checkGSLBRecord,
	},
	&kindOf[Health, *Health]{
		name: KindHealth, singular: "health",
		field:    func(s *State) *map[string]*Health { return &s.Health },
		readOnly: "health objects are written by the controller only",
	},
}

// Kinds in dependency order: an object only refers to kinds before it.
var Kinds = kindNames(false)

// UserKinds are the kinds users write through the API and documents;
// the others (Health) are written by the controller only.
var UserKinds = kindNames(true)

func kindNames(userOnly bool) []string {
	var out []string
	for _, k := range registry {
		if !userOnly || k.User() {
			out = append(out, k.Name())
		}
	}
	return out
}

// lookupKind returns the registry entry of a kind.
func lookupKind(kind string) (kindDef, error) {
	for _, k := range registry {
		if k.Name() == kind {
			return k, nil
		}
	}
	return nil, fmt.Errorf("unknown kind %q (want one of %s)", kind, strings.Join(Kinds, ", "))
}

// kindOfObject returns the registry entry of an object's kind.
func kindOfObject(o Object) kindDef {
	for _, k := range registry {
		if k.owns(o) {
			return k
		}
	}
	return nil
}

// New returns an empty object of a kind.
func New(kind string) (Object, error) {
	k, err := lookupKind(kind)
	if err != nil {
		return nil, err
	}
	return k.New(), nil
}

// KindOf returns an object's kind ("" for an object of no registered kind).
func KindOf(o Object) string {
	if k := kindOfObject(o); k != nil {
		return k.Name()
	}
	return ""
}

// Singular names a kind in messages ("edge set").
func Singular(kind string) string {
	if k, err := lookupKind(kind); err == nil {
		return k.Singular()
	}
	return kind
}

// DecodeList decodes a JSON array of objects of a kind (an API list's
// items).
func DecodeList(kind string, data []byte) ([]Object, error) {
	k, err := lookupKind(kind)
	if err != nil {
		return nil, err
	}
	return k.decodeList(data)
}

// kindDef is what the registry knows of a kind; kindOf implements it for
// every kind.
type kindDef interface {
	Name() string
	Singular() string
	User() bool
	New() Object
	owns(Object) bool
	decodeList([]byte) ([]Object, error)

	// The State's side.
	initState(*State)
	cloneInto(dst, src *State)
	get(s *State, key string) (Object, bool)
	keys(*State) []string
	count(*State) int
	put(*State, Object) (undo func(), err error)
	del(*State, Object) (undo func(), err error)
	set(*State, Object)
	remove(*State, Object)
}

// kindOf is a kind whose objects are P (= *T), kept by the State in the
// map field returns, keyed by Key().
type kindOf[T any, P interface {
	*T
	Object
}] struct {
	name, singular string
	user           bool
	field          func(*State) *map[string]P
	// less orders keys for Keys; nil: by the key string.
	less func(a, b P) bool
	// check is Put's referential check of o against the rest of the
	// state, before o is stored; old is the object it replaces, if had.
	check func(s *State, o, old P, had bool) Errors
	// index adds (add) or removes an object's entries in the State's
	// secondary indexes; Put, Delete, Set and Remove keep them right.
	index func(s *State, o P, add bool)
	// afterPut checks what needs o stored (coverage after a shrink); an
	// error undoes the Put.
	afterPut func(s *State, o, old P, had bool) error
	// checkDelete refuses to delete an object others refer to.
	checkDelete func(s *State, o P) error
	// afterDelete checks what needs o gone; an error undoes the Delete.
	afterDelete func(s *State, o P) error
	// readOnly: Put and Delete refuse the kind, with this reason.
	readOnly string
}

func (k *kindOf[T, P]) Name() string     { return k.name }
func (k *kindOf[T, P]) Singular() string { return k.singular }
func (k *kindOf[T, P]) User() bool       { return k.user }
func (k *kindOf[T, P]) New() Object      { return P(new(T)) }

func (k *kindOf[T, P]) owns(o Object) bool {
	_, ok := o.(P)
	return ok
}

func (k *kindOf[T, P]) decodeList(data []byte) ([]Object, error) {
	var l []T
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, fmt.Errorf("decoding the %s: %w", k.name, err)
	}
	out := make([]Object, len(l))
	for i := range l {
		out[i] = P(&l[i])
	}
	return out, nil
}

func (k *kindOf[T, P]) initState(s *State) { *k.field(s) = map[string]P{} }

func (k *kindOf[T, P]) cloneInto(dst, src *State) { *k.field(dst) = maps.Clone(*k.field(src)) }

func (k *kindOf[T, P]) get(s *State, key string) (Object, bool) {
	o, ok := (*k.field(s))[key]
	if !ok {
		return nil, false
	}
	return o, true
}

func (k *kindOf[T, P]) keys(s *State) []string {
	m := *k.field(s)
	if k.less == nil {
		return sortedKeys(m)
	}
	objs := make([]P, 0, len(m))
	for _, o := range m {
		objs = append(objs, o)
	}
	slices.SortFunc(objs, func(a, b P) int {
		switch {
		case k.less(a, b):
			return -1
		case k.less(b, a):
			return 1
		}
		return 0
	})
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key()
	}
	return out
}

func (k *kindOf[T, P]) count(s *State) int { return len(*k.field(s)) }

func (k *kindOf[T, P]) reindex(s *State, o P, add bool) {
	if k.index != nil && o != nil {
		k.index(s, o, add)
	}
}

func (k *kindOf[T, P]) put(s *State, obj Object) (func(), error) {
	o := obj.(P)
	if k.readOnly != "" {
		return nil, &ConflictError{Msg: fmt.Sprintf("%s %s: %s", k.singular, o.Key(), k.readOnly)}
	}
	m := *k.field(s)
	key := o.Key()
	old, had := m[key]
	if k.check != nil {
		if es := k.check(s, o, old, had); len(es) > 0 {
			return nil, es
		}
	}
	k.reindex(s, old, false)
	m[key] = o
	k.reindex(s, o, true)
	undo := func() {
		k.reindex(s, o, false)
		if had {
			m[key] = old
			k.reindex(s, old, true)
		} else {
			delete(m, key)
		}
	}
	if k.afterPut != nil {
		if err := k.afterPut(s, o, old, had); err != nil {
			undo()
			return nil, err
		}
	}
	return undo, nil
}

func (k *kindOf[T, P]) del(s *State, obj Object) (func(), error) {
	o := obj.(P)
	if k.readOnly != "" {
		return nil, &ConflictError{Msg: fmt.Sprintf("%s %s: %s", k.singular, o.Key(), k.readOnly)}
	}
	if k.checkDelete != nil {
		if err := k.checkDelete(s, o); err != nil {
			return nil, err
		}
	}
	m := *k.field(s)
	key := o.Key()
	k.reindex(s, o, false)
	delete(m, key)
	undo := func() { m[key] = o; k.reindex(s, o, true) }
	if k.afterDelete != nil {
		if err := k.afterDelete(s, o); err != nil {
			undo()
			return nil, err
		}
	}
	return undo, nil
}

func (k *kindOf[T, P]) set(s *State, obj Object) {
	o := obj.(P)
	m := *k.field(s)
	key := o.Key()
	k.reindex(s, m[key], false)
	m[key] = o
	k.reindex(s, o, true)
}

func (k *kindOf[T, P]) remove(s *State, obj Object) {
	o := obj.(P)
	k.reindex(s, o, false)
	delete(*k.field(s), o.Key())
}
