package controller

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/setplan"
)

// The status page (GET /ui, ui.go) is built in two steps: statusPage, a
// pure function, turns the desired state and the nodes' published
// statuses into a Page (this file); ui.go renders the Page with
// html/template. Every list the page shows is bounded: a region of
// 100,000 EIPs or services renders its counts and the first rows of each
// list, with "and N more".
const (
	// pageRows bounds each table (services, quarantines, packages, the
	// addresses a set announces or pulled out).
	pageRows = 50
	// pageInner bounds the lists inside a row (prefixes, backends of a
	// pool, pools of a service, a set's edges, errors of an edge).
	pageInner = 20
	// Picture bounds: sets and AZs drawn, edges per set and hosts per AZ.
	picSets, picAZs, picEdges, picHosts = 6, 6, 6, 8
	// picLabel bounds a label drawn in the picture (in runes).
	picLabel = 22
)

// Page is what the status page shows.
type Page struct {
	Generated time.Time
	Version   string
	Revision  int64
	Store     string
	// Objects counts the objects of each kind, in kind order.
	Objects  []KindCount
	Errors   Bounded[string]
	Picture  Picture
	Sets     []SetView
	SetsMore int
	EIPs     EIPSummary
	Services Bounded[ServiceView]
	// BackendsUp and BackendsDown count every service's backends.
	BackendsUp, BackendsDown int
	Quarantines              Bounded[QuarantineView]
	Packages                 Bounded[PackageView]
}

// Bounded is the first rows of a list and how many were left out.
type Bounded[T any] struct {
	Items []T
	More  int
}

func bound[T any](all []T, n int) Bounded[T] {
	if len(all) > n {
		return Bounded[T]{Items: all[:n:n], More: len(all) - n}
	}
	return Bounded[T]{Items: all}
}

// KindCount is the number of objects of a kind.
type KindCount struct {
	Kind string
	N    int
}

// Health classes of what the page shows (ui.go maps them to colours).
const (
	classOK      = "ok"
	classWarn    = "warn"
	classBad     = "bad"
	classUnknown = "unknown"
)

// SetView is an edge set: its role, what it announces and its edges.
type SetView struct {
	Name, Role string
	// Announces are the routes its edges announce when well (setplan).
	Announces Bounded[string]
	// PulledOut, for a prefix set, are the /32s of its prefixes that
	// another set (dedicated, quarantine) announces, with that set.
	PulledOut Bounded[string]
	Edges     Bounded[EdgeView]
	Class     string
}

// EdgeView is one edge of a set and what its published status says.
type EdgeView struct {
	Name, Underlay string
	Class          string // ok, warn, bad, unknown
	State          string // one line: announcing, drained, no status, ...
	Applied        int64  // the store revision its maps reflect
	Advertised     int    // prefixes its BGP speaker advertises
	Sessions       string // "1/2 established" ("": no BGP)
	Errors         Bounded[string]
}

// EIPSummary counts the EIPs (never listed one by one).
type EIPSummary struct {
	Total, Bound, PulledOut, Limited, InPackages, Quarantined int
}

// ServiceView is a service with its pools' backends and their health.
type ServiceView struct {
	Name, VIP, Mode, Description string
	// ServedBy is the set whose edges receive the VIP's traffic, and why.
	ServedBy, Why string
	Pools         Bounded[PoolView]
	Up, Down      int
	Class         string
}

// PoolView is one pool of a service.
type PoolView struct {
	Name     string
	Check    string // the health check's type ("": none)
	Backends Bounded[BackendView]
}

// BackendView is a backend and the controller's verdict on it.
type BackendView struct {
	Key    string
	Weight uint32
	Health string // up, down, unchecked
	Class  string
}

// QuarantineView is a quarantined address.
type QuarantineView struct {
	Address, By, Reason string
}

// PackageView is a bandwidth package.
type PackageView struct {
	Name, Capacity, Burst, Description string
	EIPs                               int
}

// PageInput is what statusPage needs: the state (read, never changed),
// its revision, and the nodes' statuses by role.
type PageInput struct {
	State    *model.State
	Revision int64
	Version  string
	Store    string
	Nodes    map[string][]model.NodeStatus
	Errors   []string
	Now      time.Time
}

// statusPage builds the page from in. It is pure: the same input gives
// the same page.
func statusPage(in PageInput) Page {
	st := in.State
	p := Page{Generated: in.Now.UTC(), Version: in.Version, Revision: in.Revision, Store: in.Store,
		Errors: bound(in.Errors, pageInner)}
	for _, k := range model.UserKinds {
		p.Objects = append(p.Objects, KindCount{k, st.Len(k)})
	}
	edges := map[string]*model.NodeStatus{}
	for i := range in.Nodes["edge"] {
		edges[in.Nodes["edge"][i].Name] = &in.Nodes["edge"][i]
	}
	agents := map[string]*model.NodeStatus{}
	for i := range in.Nodes["agent"] {
		agents[in.Nodes["agent"][i].Name] = &in.Nodes["agent"][i]
	}
	plan := setplan.FromState(st)

	// Sets: what each announces; for prefix sets, which of their
	// addresses another set took.
	pulledFrom := map[string][]netip.Addr{}
	for a := range plan.PulledOut {
		addPulled(plan, pulledFrom, a)
	}
	for a := range plan.Quarantined {
		if _, ok := plan.PulledOut[a]; !ok {
			addPulled(plan, pulledFrom, a)
		}
	}
	setNames := sortedNames(st.EdgeSets)
	for _, name := range bounded(setNames, pageRows) {
		s := st.EdgeSets[name]
		v := SetView{Name: name, Role: cmp.Or(s.Role, "prefix")}
		var ann []string
		if len(s.Edges) == 0 {
			ann = nil
		} else {
			for _, pr := range plan.Announcements(s.Edges[0].Name) {
				ann = append(ann, pr.String())
			}
		}
		v.Announces = bound(ann, pageRows)
		pulled := pulledFrom[name]
		slices.SortFunc(pulled, netip.Addr.Compare)
		var pl []string
		for _, a := range bounded(pulled, pageRows) {
			to, why, _ := plan.Serving(a)
			pl = append(pl, fmt.Sprintf("%s/32 → %s (%s)", a, to, why))
		}
		v.PulledOut = Bounded[string]{Items: pl, More: max(0, len(pulled)-pageRows)}
		var evs []EdgeView
		worst := classOK
		for _, e := range s.Edges {
			ev := edgeView(e, edges[e.Name])
			worst = worse(worst, ev.Class)
			evs = append(evs, ev)
		}
		if len(s.Edges) == 0 {
			worst = classBad
		}
		v.Class = worst
		v.Edges = bound(evs, pageInner)
		p.Sets = append(p.Sets, v)
	}
	p.SetsMore = max(0, len(setNames)-pageRows)

	// EIPs: counts only.
	for _, e := range st.EIPs {
		p.EIPs.Total++
		if e.Binding != nil {
			p.EIPs.Bound++
		}
		if e.Set != "" {
			p.EIPs.PulledOut++
		}
		if e.Limits != nil {
			p.EIPs.Limited++
		}
		if plan.Quarantined[e.Address] {
			p.EIPs.Quarantined++
		}
	}
	for _, bp := range st.BandwidthPackages {
		p.EIPs.InPackages += len(bp.EIPs)
	}

	// Services, the unhealthy ones first, then by name.
	var svcs []ServiceView
	for _, name := range sortedNames(st.Services) {
		sv := serviceView(st.Services[name], st.Health[name], plan)
		p.BackendsUp += sv.Up
		p.BackendsDown += sv.Down
		svcs = append(svcs, sv)
	}
	rank := map[string]int{classBad: 0, classWarn: 1, classOK: 2}
	slices.SortStableFunc(svcs, func(a, b ServiceView) int { return rank[a.Class] - rank[b.Class] })
	p.Services = bound(svcs, pageRows)

	var qs []QuarantineView
	for _, k := range bounded(st.Keys(model.KindQuarantine), pageRows) {
		q := st.Quarantines[k]
		qs = append(qs, QuarantineView{Address: q.Address.String(), By: cmp.Or(q.By, "operator"), Reason: q.Reason})
	}
	p.Quarantines = Bounded[QuarantineView]{Items: qs, More: max(0, len(st.Quarantines)-pageRows)}

	var ps []PackageView
	for _, k := range bounded(sortedNames(st.BandwidthPackages), pageRows) {
		bp := st.BandwidthPackages[k]
		ps = append(ps, PackageView{Name: bp.Name, Capacity: bitRate(bp.Capacity), Burst: cmp.Or(time.Duration(bp.Burst), model.DefaultBandwidthBurst).String(),
			Description: bp.Description, EIPs: len(bp.EIPs)})
	}
	p.Packages = Bounded[PackageView]{Items: ps, More: max(0, len(st.BandwidthPackages)-pageRows)}

	p.Picture = picture(st, p.Sets, agents)
	return p
}

// addPulled files a (pulled out or quarantined) under the prefix set it
// would be served by without either.
func addPulled(plan setplan.Input, pulledFrom map[string][]netip.Addr, a netip.Addr) {
	base := plan.Carriers(a)[2]
	if now, _, _ := plan.Serving(a); base != "" && now != base {
		pulledFrom[base] = append(pulledFrom[base], a)
	}
}

// edgeView says what an edge's status (nil: none published) shows.
func edgeView(e model.EdgeNode, ns *model.NodeStatus) EdgeView {
	v := EdgeView{Name: e.Name, Underlay: e.Underlay.String()}
	switch {
	case ns == nil:
		v.Class, v.State = classUnknown, "no status: the edge is not running or cannot reach the store"
		if e.Drained {
			v.State = "drained; " + v.State
		}
		return v
	case e.Drained:
		v.Class, v.State = classWarn, "drained"
	case ns.BGP == nil:
		v.Class, v.State = classOK, "running (no BGP speaker)"
	case ns.BGP.Announcing:
		v.Class, v.State = classOK, "announcing"
	default:
		v.Class, v.State = classBad, "not announcing"
		if len(ns.BGP.Failing) > 0 {
			v.State += ": " + strings.Join(ns.BGP.Failing, ", ")
		}
	}
	v.Applied = ns.AppliedRevision
	if b := ns.BGP; b != nil {
		v.Advertised = len(b.Advertised)
		up := 0
		for _, s := range b.Sessions {
			if s.State == "established" {
				up++
			}
		}
		v.Sessions = fmt.Sprintf("%d/%d established", up, len(b.Sessions))
		if up < len(b.Sessions) && v.Class == classOK {
			v.Class = classWarn
		}
	}
	v.Errors = bound(ns.Errors, pageInner)
	if len(ns.Errors) > 0 && v.Class == classOK {
		v.Class = classWarn
	}
	return v
}

// serviceView is a service with its pools and the controller's verdict
// on each backend (h: nil when no backend is down).
func serviceView(svc *model.Service, h *model.Health, plan setplan.Input) ServiceView {
	v := ServiceView{Name: svc.Name, VIP: svc.VIP.String(), Mode: svc.Mode, Description: svc.Description}
	v.ServedBy, v.Why, _ = plan.Serving(svc.VIP)
	var pools []PoolView
	for _, pl := range svc.Pools {
		pv := PoolView{Name: pl.Name}
		if pl.Health != nil {
			pv.Check = pl.Health.Type
		}
		down := h.DownSet(pl.Name)
		var bs []BackendView
		for _, b := range pl.Backends {
			bv := BackendView{Key: b.Key(), Weight: b.W(), Health: "up", Class: classOK}
			switch {
			case down[b.Key()]:
				bv.Health, bv.Class = "down", classBad
				v.Down++
			case pl.Health == nil:
				bv.Health = "unchecked"
				v.Up++
			default:
				v.Up++
			}
			bs = append(bs, bv)
		}
		// The down ones first: they are what a reader looks for.
		slices.SortStableFunc(bs, func(a, b BackendView) int {
			return cmp.Compare(downRank(a), downRank(b))
		})
		pv.Backends = bound(bs, pageInner)
		pools = append(pools, pv)
	}
	v.Pools = bound(pools, pageInner)
	switch {
	case v.Down == 0:
		v.Class = classOK
	case v.Up == 0:
		v.Class = classBad
	default:
		v.Class = classWarn
	}
	return v
}

func downRank(b BackendView) int {
	if b.Class == classBad {
		return 0
	}
	return 1
}

// worse returns the worse of two classes.
func worse(a, b string) string {
	rank := map[string]int{classOK: 0, classUnknown: 1, classWarn: 2, classBad: 3}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// bitRate writes bits per second with a unit.
func bitRate(bps uint64) string {
	for _, u := range []struct {
		n    uint64
		unit string
	}{{1e12, "Tbit/s"}, {1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}} {
		if bps >= u.n {
			return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", float64(bps)/float64(u.n)), "0"), ".") + " " + u.unit
		}
	}
	return fmt.Sprintf("%d bit/s", bps)
}

// plural writes n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func bounded[T any](s []T, n int) []T { return s[:min(len(s), n)] }

// Picture is the region drawn as an SVG: the edge sets (with their
// edges) above the region's underlay, the AZs (with their hosts) below.
// Coordinates are computed here; ui.go only writes them out. Colours
// are the classes'; labels and titles are text (escaped by the template).
type Picture struct {
	W, H  int
	Rects []PicRect
	Lines []PicLine
	Texts []PicText
}

// PicRect is a box; Title is its tooltip.
type PicRect struct {
	X, Y, W, H int
	Class      string // ok, warn, bad, unknown, set, az, region
	Title      string
}

// PicLine is a link.
type PicLine struct{ X1, Y1, X2, Y2 int }

// PicText is a label at (X, Y).
type PicText struct {
	X, Y  int
	Text  string
	Bold  bool
	Small bool
}

func label(s string) string {
	r := []rune(s)
	if len(r) > picLabel {
		return string(r[:picLabel-1]) + "…"
	}
	return s
}

// picture draws the region.
func picture(st *model.State, sets []SetView, agents map[string]*model.NodeStatus) Picture {
	const (
		width  = 1200
		margin = 20
		gap    = 16
		row    = 26
	)
	pic := Picture{W: width}
	y := margin
	pic.Texts = append(pic.Texts, PicText{X: margin, Y: y + 14, Text: "upstream routers / Internet", Bold: true})
	y += 30
	// The sets row.
	shown := bounded(sets, picSets)
	n := len(shown)
	if len(sets) > n {
		n++ // a box saying how many more
	}
	setsTop := y
	setsBottom := y
	colW := func(n int) int { return (width - 2*margin - gap*max(n-1, 0)) / max(n, 1) }
	cw := colW(n)
	underlayY := 0
	type anchor struct{ x, y int }
	var setAnchors []anchor
	for i, s := range shown {
		x := margin + i*(cw+gap)
		edges := s.Edges.Items
		ne := min(len(edges), picEdges)
		h := 48 + row*ne
		if len(edges) > ne || s.Edges.More > 0 {
			h += row
		}
		pic.Rects = append(pic.Rects, PicRect{X: x, Y: y, W: cw, H: h, Class: "set", Title: fmt.Sprintf("edge set %s (%s): %s announced", s.Name, s.Role, plural(len(s.Announces.Items)+s.Announces.More, "route"))})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 18, Text: label("set " + s.Name), Bold: true})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 34, Text: label(s.Role + ", " + plural(len(s.Announces.Items)+s.Announces.More, "route")), Small: true})
		for j, e := range edges[:ne] {
			ey := y + 44 + j*row
			pic.Rects = append(pic.Rects, PicRect{X: x + 8, Y: ey, W: cw - 16, H: row - 4, Class: e.Class, Title: fmt.Sprintf("edge %s (%s): %s", e.Name, e.Underlay, e.State)})
			pic.Texts = append(pic.Texts, PicText{X: x + 14, Y: ey + 16, Text: label(e.Name), Small: true})
		}
		if more := len(edges) - ne + s.Edges.More; more > 0 {
			pic.Texts = append(pic.Texts, PicText{X: x + 14, Y: y + 44 + ne*row + 14, Text: fmt.Sprintf("and %d more edges", more), Small: true})
		}
		setAnchors = append(setAnchors, anchor{x + cw/2, y + h})
		setsBottom = max(setsBottom, y+h)
		pic.Lines = append(pic.Lines, PicLine{x + cw/2, setsTop - 8, x + cw/2, y})
	}
	if len(sets) > len(shown) {
		x := margin + len(shown)*(cw+gap)
		pic.Rects = append(pic.Rects, PicRect{X: x, Y: y, W: cw, H: 48, Class: "set", Title: "sets not drawn"})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 28, Text: fmt.Sprintf("and %d more sets", len(sets)-len(shown)), Small: true})
		setsBottom = max(setsBottom, y+48)
	}
	if len(sets) == 0 {
		pic.Texts = append(pic.Texts, PicText{X: margin, Y: y + 20, Text: "no edge sets"})
		setsBottom = y + 30
	}
	// The underlay.
	underlayY = setsBottom + 30
	pic.Rects = append(pic.Rects, PicRect{X: margin, Y: underlayY, W: width - 2*margin, H: 24, Class: "region", Title: "the region's underlay network"})
	pic.Texts = append(pic.Texts, PicText{X: margin + 8, Y: underlayY + 16, Text: "underlay", Small: true})
	for _, a := range setAnchors {
		pic.Lines = append(pic.Lines, PicLine{a.x, a.y, a.x, underlayY})
	}
	// The AZs row, with their hosts.
	azNames := sortedNames(st.AZs)
	hostsOf := map[string][]string{}
	for _, name := range sortedNames(st.Hosts) {
		h := st.Hosts[name]
		hostsOf[h.AZ] = append(hostsOf[h.AZ], name)
	}
	y = underlayY + 24 + 30
	azShown := bounded(azNames, picAZs)
	n = len(azShown)
	if len(azNames) > n {
		n++
	}
	cw = colW(n)
	bottom := y
	for i, name := range azShown {
		az := st.AZs[name]
		x := margin + i*(cw+gap)
		hosts := hostsOf[name]
		nh := min(len(hosts), picHosts)
		h := 48 + row*nh
		if len(hosts) > nh {
			h += row
		}
		title := "AZ " + name
		if az.Region != "" {
			title += " in region " + az.Region
		}
		if az.Description != "" {
			title += ": " + az.Description
		}
		pic.Rects = append(pic.Rects, PicRect{X: x, Y: y, W: cw, H: h, Class: "az", Title: title})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 18, Text: label("AZ " + name), Bold: true})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 34, Text: plural(len(hosts), "host"), Small: true})
		for j, hn := range hosts[:nh] {
			hy := y + 44 + j*row
			host := st.Hosts[hn]
			class, state := classUnknown, "no agent status"
			if a := agents[hn]; a != nil {
				class, state = classOK, fmt.Sprintf("agent reporting, %d EIPs hosted", a.Routes)
				if len(a.Errors) > 0 {
					class, state = classWarn, fmt.Sprintf("agent reporting %d errors", len(a.Errors))
				}
			}
			pic.Rects = append(pic.Rects, PicRect{X: x + 8, Y: hy, W: cw - 16, H: row - 4, Class: class,
				Title: fmt.Sprintf("host %s (%s), %s: %s", hn, host.Underlay, plural(len(host.Guests), "guest"), state)})
			pic.Texts = append(pic.Texts, PicText{X: x + 14, Y: hy + 16, Text: label(fmt.Sprintf("%s (%s)", hn, plural(len(host.Guests), "guest"))), Small: true})
		}
		if len(hosts) > nh {
			pic.Texts = append(pic.Texts, PicText{X: x + 14, Y: y + 44 + nh*row + 14, Text: fmt.Sprintf("and %d more hosts", len(hosts)-nh), Small: true})
		}
		pic.Lines = append(pic.Lines, PicLine{x + cw/2, underlayY + 24, x + cw/2, y})
		bottom = max(bottom, y+h)
	}
	if len(azNames) > len(azShown) {
		x := margin + len(azShown)*(cw+gap)
		pic.Rects = append(pic.Rects, PicRect{X: x, Y: y, W: cw, H: 48, Class: "az", Title: "AZs not drawn"})
		pic.Texts = append(pic.Texts, PicText{X: x + 8, Y: y + 28, Text: fmt.Sprintf("and %d more AZs", len(azNames)-len(azShown)), Small: true})
		bottom = max(bottom, y+48)
	}
	if len(azNames) == 0 {
		pic.Texts = append(pic.Texts, PicText{X: margin, Y: y + 20, Text: "no AZs"})
		bottom = y + 30
	}
	pic.H = bottom + margin
	return pic
}
