package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"sort"
	"time"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
	"github.com/azgate/azgate/internal/store"
)

// Edge groups (issue 8, agents and sets). The replies and egress of an
// EIP or VIP go to a live member of the edge set that serves it
// (setplan.Serving): each set is a group of the data plane
// (agent_groups), the EIPs and VIPs name theirs, and group 0 holds every
// set's live members for addresses no set serves.
//
// Who is live:
//   - a drained member is not (the operator takes it out of service; it
//     still forwards what reaches it, and NVGRE from it is still taken);
//   - a member with BGP (EdgeNode.BGP set) is live while its announce key
//     (store.AnnounceKey) exists: it announces the set's routes, so
//     upstream sends it traffic; the key is leased (about 2 s), so a dead
//     edge's vanishes by itself;
//   - a member without BGP is statically routed (today's lab, the e2e
//     tests): always live.
//
// Make-before-break (ReplySet): an address moved into a dedicated set
// (pulled out) or the quarantine set keeps its replies on the group of
// the prefix set covering it (Want.Covering) until that set's edges
// announce it: every live member's announcement lists a route covering
// the address (model.Announcement.Prefixes). An edge announces only
// while its maps hold the desired state, with the routes of the commit
// it applied, so by then each member holds the address's copy, and
// upstream turns the traffic to the set at the same moment. The prefix
// set holds the copy all along (it is one of the address's carriers,
// setplan.Carriers), and its edges take the replies meanwhile. A set with
// a live member without BGP switches at once (nothing tells when it
// holds the copy; a static route does not wait either). The way back (a
// release) is at once: the prefix set never lost the copy.
//
// A dedicated or quarantine set none of whose members is live announces
// the address's /32 no more: upstream, the covering prefix set's route
// takes its traffic again, so its replies go to that prefix set's group
// (unless it has no live member either; the same while the address
// waits for the set's announcement). Any other set with members none
// of which is live falls back to its members that are not drained, or
// with none, to all of them: dropping every reply helps nobody, and a
// set whose members all stopped announcing is more likely to have lost
// the store than to be down (they keep forwarding while the store is
// away). Each fallback is logged and counted.

// GroupPlan is the members each group gets.
type GroupPlan struct {
	Sets map[string][]netip.Addr // set -> live members, in name order
	All  []netip.Addr            // group 0: every set's live members (the first MaxGroupMembers)
	// Fallback lists the sets with no live member, in name order.
	Fallback []string

	// For ReplySet: each set's members in its group, whether it fell
	// back, and the announcements they were picked by.
	members  map[string][]model.EdgeNode
	fellBack map[string]bool
	ann      setplan.Announcing
}

// PlanGroups computes the groups from the desired state's sets and the
// announcements.
func PlanGroups(sets map[string][]model.EdgeNode, ann setplan.Announcing) GroupPlan {
	p := GroupPlan{Sets: map[string][]netip.Addr{}, members: map[string][]model.EdgeNode{}, fellBack: map[string]bool{}, ann: ann}
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[netip.Addr]bool{}
	for _, name := range names {
		nodes, fellBack := liveNodes(name, sets[name], ann)
		if fellBack {
			p.Fallback = append(p.Fallback, name)
			p.fellBack[name] = true
		}
		p.members[name] = nodes
		live := underlays(nodes)
		p.Sets[name] = live
		for _, a := range live {
			if !seen[a] && len(p.All) < dataplane.MaxGroupMembers {
				seen[a] = true
				p.All = append(p.All, a)
			}
		}
	}
	return p
}

// LiveMembers returns the underlay addresses of set's live members
// (setplan.LiveMembers; see the head of this file), at most
// MaxGroupMembers, and whether the set fell back to members that are not
// live.
func LiveMembers(set string, members []model.EdgeNode, ann setplan.Announcing) (live []netip.Addr, fellBack bool) {
	nodes, fellBack := liveNodes(set, members, ann)
	return underlays(nodes), fellBack
}

// liveNodes is setplan.LiveMembers, at most MaxGroupMembers.
func liveNodes(set string, members []model.EdgeNode, ann setplan.Announcing) ([]model.EdgeNode, bool) {
	nodes, fellBack := setplan.LiveMembers(set, members, ann)
	if len(nodes) > dataplane.MaxGroupMembers {
		nodes = nodes[:dataplane.MaxGroupMembers] // the model allows no more
	}
	return nodes, fellBack
}

func underlays(nodes []model.EdgeNode) []netip.Addr {
	var out []netip.Addr
	for _, m := range nodes {
		out = append(out, m.Underlay)
	}
	return out
}

// ReplySet returns the set whose group gets the replies of address a,
// which set serves (setplan.Serving, "": none, group 0) and the prefix
// set covering covers (Want.Covering), and whether a waits for set's
// announcement (make-before-break, see the head of this file):
//
//   - a served by its prefix set, or by none: set;
//   - set (a dedicated or quarantine set) has no live member: covering;
//   - covering has no live member: set;
//   - set has a live member without BGP: set, at once;
//   - every live member of set announces a route covering a: set;
//   - otherwise covering, waiting.
func (p GroupPlan) ReplySet(a netip.Addr, set, covering string) (reply string, waiting bool) {
	switch {
	case set == "" || covering == "" || covering == set:
		return set, false
	case p.fellBack[set]:
		if p.fellBack[covering] {
			return set, false
		}
		return covering, false
	case p.fellBack[covering]:
		return set, false
	case p.announced(set, a):
		return set, false
	}
	return covering, true
}

// announced reports whether set's edges carry a from upstream: a live
// member without BGP (statically routed), or every live member announces
// a route covering a.
func (p GroupPlan) announced(set string, a netip.Addr) bool {
	live := p.members[set]
	if len(live) == 0 {
		return false
	}
	for _, m := range live {
		if m.BGP == nil {
			return true
		}
	}
	for _, m := range live {
		if !p.ann.Covers(set, m.Name, a) {
			return false
		}
	}
	return true
}

// SetAnnouncements takes the edges' announcements (store.WatchAnnouncements)
// and rewrites the groups they change at once: a member whose key
// vanished leaves its group (its generation moves, so the flows it held
// go to the others by flow hash). A set that lost (or regained) its last
// live member may move the addresses it serves to another group
// (groupOf): the reconcile writes those too.
func (r *Reconciler) SetAnnouncements(all map[string]model.Announcement) {
	ann := setplan.AnnouncingFrom(all)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ann = ann
	if r.want == nil {
		return
	}
	kept := r.resetErrs()
	r.reconcile(*r.want)
	if len(r.errs) > kept {
		r.scheduleRetry(r.wantRev) // the full apply writes everything again
	}
}

// noteFallbacks logs and counts the sets that fell back to members that
// are not live, and those that have live members again.
func (r *Reconciler) noteFallbacks(plan GroupPlan) {
	fb := map[string]bool{}
	for _, s := range plan.Fallback {
		fb[s] = true
		if !r.fallback[s] {
			r.fallbacks++
			r.log.Warn("no member of the edge set is live: its replies go to every member", "set", s, "members", plan.Sets[s])
		}
	}
	for s := range r.fallback {
		if !fb[s] {
			r.log.Info("the edge set has live members again", "set", s, "live", plan.Sets[s])
		}
	}
	r.fallback = fb
}

// noteWaiting logs the addresses that start waiting for the set serving
// them to announce them, and those that stop (the set announces them, or
// they moved again).
func (r *Reconciler) noteWaiting(waiting map[netip.Addr]string) {
	for _, a := range sortedAddrs(waiting) {
		if set := waiting[a]; r.waiting[a] != set {
			r.log.Info("the address's replies stay on its prefix set's edges until the set serving it announces it", "addr", a, "set", set)
		}
	}
	for _, a := range sortedAddrs(r.waiting) {
		if _, ok := waiting[a]; !ok {
			r.log.Info("the address waits for no set's announcement any more", "addr", a, "set", r.waiting[a])
		}
	}
	r.waiting = waiting
}

// Groups returns the groups as programmed, by set ("" for group 0), and
// how many times a set fell back to members that are not live.
func (r *Reconciler) Groups() (map[string]dataplane.AgentGroup, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]dataplane.AgentGroup{}
	for slot, g := range r.groups {
		if slot == 0 || g.Set != "" {
			out[g.Set] = g
		}
	}
	return out, r.fallbacks
}

// WatchAnnouncements follows the edges' announce keys into r until ctx
// ends: a full read, then the watch (store.WatchAnnouncements); a store
// failure is retried with backoff (the groups keep their members
// meanwhile). Malformed keys are logged once each and counted. first, if
// not nil, is called after the first read.
func WatchAnnouncements(ctx context.Context, st store.PrefixReader, r *Reconciler, log *slog.Logger, first func()) {
	backoff := 100 * time.Millisecond
	seenBad := map[string]bool{}
	for ctx.Err() == nil {
		read := false
		err := store.WatchAnnouncements(ctx, st, func(all map[string]model.Announcement) {
			r.SetAnnouncements(all)
			if !read {
				read, backoff = true, 100*time.Millisecond
				if first != nil {
					first()
					first = nil
				}
			}
		}, func(e store.AnnounceEntry) {
			r.mu.Lock()
			r.badAnnounce++
			r.mu.Unlock()
			if !seenBad[e.Key] {
				seenBad[e.Key] = true
				log.Warn("malformed announce key ignored: its edge does not count as live", "key", e.Key, "err", e.Err)
			}
		})
		if ctx.Err() != nil {
			return
		}
		log.Warn("watching the announcements failed; reading them again", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
