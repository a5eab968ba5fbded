package setplan

import (
	"net/netip"

	"github.com/azgate/azgate/internal/model"
)

// Announcing is the edges that keep their announce key
// (store.AnnounceKey), by set and edge name, with the routes each one
// announces (model.Announcement.Prefixes). An edge announces only while
// its maps hold the desired state (edge.Announcer), and its routes are
// those of the last commit it applied: a route it lists is one it serves.
type Announcing map[string]map[string]Routes

// Routes are the routes an edge announces, its host routes (a dedicated
// or quarantine set's /32s, possibly many) by address.
type Routes struct {
	hosts    map[netip.Addr]bool
	prefixes []netip.Prefix // the others
}

// Has reports whether edge, a member of set, keeps its announce key.
func (a Announcing) Has(set, edge string) bool {
	_, ok := a[set][edge]
	return ok
}

// Covers reports whether edge, a member of set, announces a route that
// covers addr.
func (a Announcing) Covers(set, edge string, addr netip.Addr) bool {
	r := a[set][edge]
	if r.hosts[addr] {
		return true
	}
	for _, p := range r.prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// AnnouncingFrom reads what store.WatchAnnouncements hands over (valid
// announcements by key: the key's set and edge are the value's).
func AnnouncingFrom(all map[string]model.Announcement) Announcing {
	out := Announcing{}
	for _, an := range all {
		if out[an.Set] == nil {
			out[an.Set] = map[string]Routes{}
		}
		var r Routes
		for _, p := range an.Prefixes {
			if p.IsSingleIP() {
				if r.hosts == nil {
					r.hosts = map[netip.Addr]bool{}
				}
				r.hosts[p.Addr()] = true
			} else {
				r.prefixes = append(r.prefixes, p.Masked())
			}
		}
		out[an.Set][an.Edge] = r
	}
	return out
}

// LiveMembers returns the live members of set, in the order of members,
// and whether the set fell back to members that are not live. A member is
// live when it is not drained and, if it speaks BGP, keeps its announce
// key (upstream sends it traffic); a set with none live falls back to its
// members that are not drained, or with none, to all of them. The agents'
// edge groups (which members get a set's replies) and the edges' static
// bandwidth split (how many members share an EIP's traffic) count alike.
func LiveMembers(set string, members []model.EdgeNode, ann Announcing) (live []model.EdgeNode, fellBack bool) {
	var notDrained []model.EdgeNode
	for _, m := range members {
		if m.Drained {
			continue
		}
		notDrained = append(notDrained, m)
		if m.BGP == nil || ann.Has(set, m.Name) {
			live = append(live, m)
		}
	}
	switch {
	case len(live) > 0:
		return live, false
	case len(notDrained) > 0:
		return notDrained, true
	}
	return members, len(members) > 0
}
