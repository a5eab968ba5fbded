package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdembed"
)

// Core is the controller without its HTTP API: the view of the state, the
// store, the serialized writes, the health and DDoS loops, and one method
// per API operation taking and returning model (and api) values and the
// typed errors of errors.go. The HTTP handlers decode a request, call one
// method and encode its result or error (errorAnswer), as GoBGP's gRPC
// methods forward to its BgpServer; the Core never sees an HTTP writer,
// so core_test.go drives it directly.
type Core struct {
	cfg      Config
	log      *slog.Logger
	started  time.Time
	embedded *etcdembed.Server
	store    *store.Store
	view     *view
	metrics  *metrics
	health   *healthAgg
	ddos     *ddosRunner

	writeMu sync.Mutex // serializes writes (see the package doc)
	// beforeCommit, if set (by tests), runs before each commit attempt.
	beforeCommit func(attempt int)
	// audited counts the commits with an audit record (trimAudit).
	audited atomic.Int64
	// The audit trimmer (audit.go): woken by writes, it trims outside
	// writeMu. trimAsked counts the wake-ups, trimDone the last one a
	// finished trim covered; beforeTrim, if set (by tests), runs before
	// each trim.
	trimWake            chan struct{}
	trimAsked, trimDone atomic.Int64
	beforeTrim          func()
	trimmerDone         chan struct{}
	// afterExportRead, if set (by tests), runs between Export's read of
	// the view and its building of the document.
	afterExportRead func()
	// commitHook, if set (by tests), commits in place of store.Commit.
	commitHook func(ctx context.Context, rev int64, ops []store.Op) (int64, error)
	// copiesOK: the scope copies in the store are the state's, as far
	// as this controller knows (from a repair to a partial commit).
	copiesOK atomic.Bool
	// repairs asks the copies' repair loop for a repair (scopes.go).
	repairs    chan struct{}
	repairDone chan struct{}
	// linger: the copies kept in a set's scope after their object left
	// it (linger.go); now, if set (by tests), is the clock of their
	// graces.
	linger *lingerState
	now    func() time.Time
	// drainWake wakes the loop that clears ended drift drains
	// (drain.go); drainDone is closed when it returns.
	drainWake chan struct{}
	drainDone chan struct{}

	reloadMu sync.Mutex
	reload   context.CancelFunc // ends the current Follow, which then reloads

	stop       context.CancelFunc
	followDone chan struct{}
	healthDone chan struct{}
	ddosDone   chan struct{}
	fatal      chan error
}

// Written is the result of a write of one object.
type Written struct {
	Revision int64        // the store's revision after it (the view's, if nothing changed)
	Action   string       // api.Created, Updated, Unchanged or Deleted
	Object   model.Object // the object as stored; nil after a delete
	// ETag is the object's own revision: its commit's, or the one it
	// had when unchanged (0 after a delete).
	ETag int64
	// Warnings are the guards' (guard.go).
	Warnings []string
	// DryRun: nothing was written (WriteOptions.DryRun); Action is what
	// the write would have done at Revision.
	DryRun bool
	// Refusals: a dry run's guard refusals, which the write would hit
	// without force (the dry run reports them with its plan).
	Refusals []string
}

// Revision is the store revision the view reflects.
func (c *Core) Revision() int64 { return c.view.revision() }

// List returns the objects of kind, in key order, and the revision.
func (c *Core) List(kind string) ([]model.Object, int64) {
	v := c.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	keys := v.st.Keys(kind)
	items := make([]model.Object, len(keys))
	for i, k := range keys {
		items[i], _ = v.st.Get(kind, k)
	}
	return items, v.rev
}

// Get returns an object with the view's revision and the object's own
// (its ETag).
func (c *Core) Get(kind, key string) (o model.Object, rev, etag int64, err error) {
	v := c.view
	v.mu.RLock()
	o, ok := v.st.Get(kind, key)
	rev, etag = v.rev, v.revs.Get(kind, key)
	v.mu.RUnlock()
	if !ok {
		return nil, 0, 0, &model.NotFoundError{Kind: kind, Key: key}
	}
	return o, rev, etag, nil
}

// Status is the controller's status and every node's published one.
func (c *Core) Status(ctx context.Context) api.Status {
	out := api.Status{
		Controller: api.Controller{Version: c.cfg.Version, Started: c.started, Revision: c.view.revision(),
			Store: c.storeKind(), Objects: c.view.counts()},
		Nodes: map[string][]model.NodeStatus{},
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, c.store, "")
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
	}
	for _, n := range nodes {
		if n.Err != nil {
			out.Errors = append(out.Errors, n.Err.Error())
			continue
		}
		out.Nodes[n.Role] = append(out.Nodes[n.Role], n.Status)
	}
	// Objects in the store that fail validation (written past the API):
	// left out of the view, so the API neither serves nor counts them.
	if inv, n := c.store.Invalid(); n > 0 {
		for _, o := range inv {
			out.Errors = append(out.Errors, fmt.Sprintf("store: %s %q is invalid and ignored: %s", o.Kind, o.Key, o.Reason))
		}
		if n > len(inv) {
			out.Errors = append(out.Errors, fmt.Sprintf("store: and %d more invalid objects", n-len(inv)))
		}
	}
	for _, ns := range out.Nodes {
		sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	}
	return out
}

// ServiceStatus is a service with its verdict, every edge's reports on
// each backend and, per pool, the table every edge reports and whether
// they agree (mergeServiceStatus).
func (c *Core) ServiceStatus(ctx context.Context, name string) (api.ServiceStatus, error) {
	v := c.view
	v.mu.RLock()
	svc, ok := v.st.Services[name]
	in := statusInput{svc: svc, health: v.st.Health[name], rev: v.rev}
	if ok {
		for _, set := range v.st.EdgeSets {
			if set.Contains(svc.VIP) {
				for _, e := range set.Edges {
					in.expected = append(in.expected, e.Name)
				}
			}
		}
	}
	v.mu.RUnlock()
	if !ok {
		return api.ServiceStatus{}, &model.NotFoundError{Kind: model.KindService, Key: name}
	}
	in.reports, in.errors = c.health.reportsOn(name)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := store.NodeStatuses(ctx, c.store, "edge")
	if err != nil {
		in.errors = append(in.errors, fmt.Sprintf("reading edge statuses from the store: %v", err))
	}
	for _, n := range nodes {
		in.edges = append(in.edges, edgeStatus{name: n.Name, status: n.Status, err: n.Err})
	}
	return mergeServiceStatus(in), nil
}

// DDoSEvents are the DDoS decisions this controller made after sequence
// number since, oldest first, and whether it is the one acting.
func (c *Core) DDoSEvents(since uint64) api.DDoSEvents {
	d := c.ddos
	d.mu.Lock()
	defer d.mu.Unlock()
	out := api.DDoSEvents{Acting: d.acting, Holder: d.holder, Enabled: !d.cfg.Off, Events: []model.DDoSEvent{}}
	for _, ev := range d.events {
		if ev.Seq > since {
			out.Events = append(out.Events, ev)
		}
	}
	for k, why := range d.bad {
		out.BadReports = append(out.BadReports, k+": "+why)
	}
	return out
}

// DDoSRates are the n highest rates the edges report, summed per address.
func (c *Core) DDoSRates(n int) api.DDoSRates {
	rates, edges := c.ddos.rates(n)
	return api.DDoSRates{Edges: edges, Rates: rates}
}

// check completes an object with its defaults and checks it on its own
// and, for a service, its health commands against the edges'.
func (c *Core) check(ctx context.Context, o model.Object) error {
	defaults(o)
	if es := o.Validate(); len(es) > 0 {
		return invalid(model.KindOf(o), o.Key(), es)
	}
	if svc, ok := o.(*model.Service); ok {
		return c.checkCommands(ctx, []placedService{{svc: svc}}, nil)
	}
	return nil
}

// defaults completes an object with its defaults (services), so that what
// is stored says explicitly what the nodes do.
func defaults(o model.Object) {
	if d, ok := o.(interface{ Defaults() }); ok {
		d.Defaults()
	}
}

// Create stores a new object (completed with its defaults); a
// ConflictError if one of its kind and key exists.
func (c *Core) Create(ctx context.Context, o model.Object) (Written, error) {
	if err := c.check(ctx, o); err != nil {
		return Written{}, err
	}
	kind, key := model.KindOf(o), o.Key()
	rev, warns, err := c.writeW(ctx, func(t *txn) error {
		if _, ok := t.st.Get(kind, key); ok {
			return &ConflictError{Msg: fmt.Sprintf("%s %q already exists (PUT /v1/%s/%s replaces it)", model.Singular(kind), key, kind, key)}
		}
		_, err := t.putRequest(o)
		return invalid(kind, key, err)
	})
	if errors.Is(err, errDryRun) {
		return Written{Revision: rev, Action: api.Created, Object: o, Warnings: warns, DryRun: true, Refusals: refusalsOf(err)}, nil
	}
	if err != nil {
		return Written{}, err
	}
	c.logChange(kind, key, api.Created, rev)
	return Written{Revision: rev, Action: api.Created, Object: o, ETag: rev, Warnings: warns}, nil
}

// Replace stores o as the object of its kind at key, creating it if
// needed (unless m requires it to exist); a KeyMismatchError if o's key
// is not key.
func (c *Core) Replace(ctx context.Context, key string, m IfMatch, o model.Object) (Written, error) {
	if err := c.check(ctx, o); err != nil {
		return Written{}, err
	}
	kind := model.KindOf(o)
	if o.Key() != key {
		return Written{}, &KeyMismatchError{Kind: kind, Key: key, Body: o.Key()}
	}
	var (
		action string
		orev   int64
	)
	rev, warns, err := c.writeW(ctx, func(t *txn) (err error) {
		if err := t.require(kind, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(kind, key)
		action, err = t.putRequest(o)
		return invalid(kind, key, err)
	})
	if errors.Is(err, errDryRun) {
		return Written{Revision: rev, Action: action, Object: o, ETag: orev, Warnings: warns, DryRun: true, Refusals: refusalsOf(err)}, nil
	}
	if err != nil {
		return Written{}, err
	}
	c.logChange(kind, key, action, rev)
	if action != api.Unchanged {
		orev = rev // one object: its own commit
	}
	return Written{Revision: rev, Action: action, Object: o, ETag: orev, Warnings: warns}, nil
}

// Delete removes an object nothing refers to (a service's verdict goes
// with it).
func (c *Core) Delete(ctx context.Context, kind, key string, m IfMatch) (Written, error) {
	rev, warns, err := c.writeW(ctx, func(t *txn) error {
		if err := t.require(kind, key, m); err != nil {
			return err
		}
		if err := t.delete(kind, key); err != nil {
			return err
		}
		if kind == model.KindService {
			t.removeHealth(key) // the verdict goes with its service
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		return Written{Revision: rev, Action: api.Deleted, Warnings: warns, DryRun: true, Refusals: refusalsOf(err)}, nil
	}
	if err != nil {
		return Written{}, err
	}
	c.logChange(kind, key, api.Deleted, rev)
	return Written{Revision: rev, Action: api.Deleted}, nil
}

// ApplyOptions are apply's options beyond WriteOptions (force, dry run).
type ApplyOptions struct {
	// Prune deletes the stored objects of the kinds the document names
	// (model.Document.Named) that it does not hold.
	Prune bool
	// Diff lists the changed fields of every updated object.
	Diff bool
}

// Bounds of prune without force: it may not delete more objects than
// this, nor every object of a kind.
const maxPruneUnforced = 100

// Apply stores a whole document: every object is checked against the
// state with the document's earlier objects already in it (dependency
// order: AZs, hosts, edge sets, EIPs); one error and nothing is written
// (an InvalidError naming each object's place). Objects equal to the
// stored ones are not written again. With Prune, the stored objects of
// the kinds the document names that it does not hold are deleted, in
// reverse dependency order, in the same commit. With WriteOptions.DryRun
// (ctx) it does all of this and writes nothing: the result says what it
// would have done.
//
// A document larger than one transaction is committed in several: if a
// conflicting write lands between two of them, the retry finds the objects
// of the first ones already stored and reports them unchanged.
func (c *Core) Apply(ctx context.Context, doc *model.Document, opts ApplyOptions) (api.ApplyResult, error) {
	placed := doc.Placed()
	var svcs []placedService
	var sets []*model.EdgeSet
	for _, p := range placed {
		defaults(p.Obj)
		switch o := p.Obj.(type) {
		case *model.Service:
			svcs = append(svcs, placedService{p.Place, o})
		case *model.EdgeSet:
			sets = append(sets, o)
		}
	}
	if err := c.checkCommands(ctx, svcs, sets); err != nil {
		return api.ApplyResult{}, err
	}
	var objs []api.AppliedObject
	rev, warns, err := c.writeW(ctx, func(t *txn) error {
		objs = make([]api.AppliedObject, len(placed), len(placed)+16)
		var es model.Errors
		for i, p := range placed {
			kind := model.KindOf(p.Obj)
			var old model.Object
			if opts.Diff {
				old, _ = t.st.Get(kind, p.Obj.Key())
			}
			action, err := t.putRequest(p.Obj)
			if err != nil {
				es = append(es, placeErrors(p.Place, err)...)
				continue
			}
			objs[i] = api.AppliedObject{Kind: kind, Key: p.Obj.Key(), Action: action}
			if action == api.Updated && old != nil {
				objs[i].Changes = fieldDiff(old, p.Obj, api.MaxDiffChanges)
			}
		}
		if len(es) > 0 {
			return &InvalidError{Fields: es, Msg: "document not applied, nothing was written: " + summary(es)}
		}
		if opts.Prune {
			pruned, err := prune(t, doc)
			if err != nil {
				return err
			}
			objs = append(objs, pruned...)
		}
		return nil
	})
	dry := errors.Is(err, errDryRun)
	if err != nil && !dry {
		return api.ApplyResult{}, err
	}
	res := api.ApplyResult{Revision: rev, Objects: objs, Warnings: warns, DryRun: dry, Refusals: refusalsOf(err)}
	for _, o := range objs {
		switch o.Action {
		case api.Created:
			res.Created++
		case api.Updated:
			res.Updated++
		case api.Deleted:
			res.Deleted++
		default:
			res.Unchanged++
		}
	}
	if !dry {
		c.log.Info("applied a document", "created", res.Created, "updated", res.Updated, "unchanged", res.Unchanged, "deleted", res.Deleted, "rev", rev)
	}
	return res, nil
}

// prune deletes, in reverse dependency order, the objects of the kinds
// doc names that it does not hold. Without force it refuses (t.refuse)
// to delete more than maxPruneUnforced objects or every object of a kind.
func prune(t *txn, doc *model.Document) ([]api.AppliedObject, error) {
	held := map[[2]string]bool{}
	for _, o := range doc.Objects() {
		held[[2]string{model.KindOf(o), o.Key()}] = true
	}
	named := doc.Named()
	var out []api.AppliedObject
	var es model.Errors
	for i := len(named) - 1; i >= 0; i-- {
		kind := named[i]
		keys := t.st.Keys(kind)
		n := 0
		for _, key := range keys {
			if held[[2]string{kind, key}] {
				continue
			}
			if err := t.delete(kind, key); err != nil {
				es = append(es, model.FieldError{Field: kind, Msg: fmt.Sprintf("pruning %s %q: %v", model.Singular(kind), key, err)})
				continue
			}
			if kind == model.KindService {
				t.removeHealth(key)
			}
			n++
			out = append(out, api.AppliedObject{Kind: kind, Key: key, Action: api.Deleted})
		}
		if n > 0 && n == len(keys) {
			t.refuse("prune would delete every %s (%d): the document names %s and holds none", model.Singular(kind), n, kind)
		}
	}
	if len(es) > 0 {
		return nil, &InvalidError{Fields: es, Msg: "document not applied, nothing was written: " + summary(es)}
	}
	if len(out) > maxPruneUnforced {
		t.refuse("prune would delete %d objects, more than %d", len(out), maxPruneUnforced)
	}
	return out, nil
}

// placeErrors prefixes an object's errors with its place in the document.
func placeErrors(place string, err error) model.Errors {
	if es, ok := err.(model.Errors); ok {
		out := make(model.Errors, len(es))
		for i, e := range es {
			out[i] = model.FieldError{Field: place + "." + e.Field, Msg: e.Msg}
		}
		return out
	}
	return model.Errors{{Field: place, Msg: err.Error()}}
}

func (c *Core) logChange(kind, key, action string, rev int64) {
	if action == api.Unchanged {
		return
	}
	c.log.Info("object "+action, "kind", kind, "key", key, "rev", rev)
}

// Narrow edits: one change to part of an object made by the controller on
// the current version, so two operators changing different parts never
// need to read-modify-write (nor retry after a 412). They take IfMatch
// like Replace (etag.go).

// modify replaces the object of kind at key with a changed copy (clone
// must copy whatever change modifies; the stored object is never
// changed); change, a rule of rules.go, may refuse with an error.
func modify[P model.Object](c *Core, ctx context.Context, kind, key string, m IfMatch, clone func(P) P, change func(st *model.State, o P) error) (Written, error) {
	var (
		action string
		stored P
		orev   int64
	)
	rev, warns, err := c.writeW(ctx, func(t *txn) (err error) {
		if err := t.require(kind, key, m); err != nil {
			return err
		}
		orev = t.revs.Get(kind, key)
		o, ok := t.st.Get(kind, key)
		if !ok {
			return &model.NotFoundError{Kind: kind, Key: key}
		}
		cp := clone(o.(P))
		if err := change(t.st, cp); err != nil {
			return err
		}
		stored = cp
		action, err = t.put(cp)
		return invalid(kind, key, err)
	})
	if errors.Is(err, errDryRun) {
		return Written{Revision: rev, Action: action, Object: stored, ETag: orev, Warnings: warns, DryRun: true, Refusals: refusalsOf(err)}, nil
	}
	if err != nil {
		return Written{}, err
	}
	c.logChange(kind, key, action, rev)
	if action != api.Unchanged {
		orev = rev
	}
	return Written{Revision: rev, Action: action, Object: stored, ETag: orev, Warnings: warns}, nil
}

func cloneEIP(e *model.EIP) *model.EIP { cp := *e; return &cp }

func cloneHost(h *model.Host) *model.Host {
	cp := *h
	cp.Guests = slices.Clone(h.Guests)
	return &cp
}

func clonePackage(p *model.BandwidthPackage) *model.BandwidthPackage {
	cp := *p
	cp.EIPs = slices.Clone(p.EIPs)
	return &cp
}

func cloneZone(z *model.DNSZone) *model.DNSZone {
	cp := *z
	cp.Records = slices.Clone(z.Records)
	return &cp
}

func cloneGSLBRecord(r *model.GSLBRecord) *model.GSLBRecord {
	cp := *r
	cp.Targets = slices.Clone(r.Targets)
	return &cp
}

func cloneService(v *model.Service) *model.Service { return v.Clone() }

// Bind binds EIP key to a guest.
func (c *Core) Bind(ctx context.Context, key string, m IfMatch, b model.Binding) (Written, error) {
	now := c.clock()
	w, err := modify(c, ctx, model.KindEIP, key, m, cloneEIP, func(st *model.State, e *model.EIP) error {
		e.Previous = previousOf(st, e, b, c.cfg.DriftGrace, now)
		e.Binding = &b
		return nil
	})
	if err == nil && !w.DryRun {
		c.pokeDrain()
	}
	return w, err
}

// Unbind unbinds EIP key.
func (c *Core) Unbind(ctx context.Context, key string, m IfMatch) (Written, error) {
	return modify(c, ctx, model.KindEIP, key, m, cloneEIP, func(_ *model.State, e *model.EIP) error {
		e.Binding = nil
		e.Previous = nil // nothing to drain to: the edges no longer route it
		return nil
	})
}

// SetEIPLimits sets the per-source and SYN limits of EIP key.
func (c *Core) SetEIPLimits(ctx context.Context, key string, m IfMatch, l model.Limits) (Written, error) {
	return modify(c, ctx, model.KindEIP, key, m, cloneEIP, func(_ *model.State, e *model.EIP) error {
		e.Limits = &l
		return nil
	})
}

// ClearEIPLimits removes the limits of EIP key.
func (c *Core) ClearEIPLimits(ctx context.Context, key string, m IfMatch) (Written, error) {
	return modify(c, ctx, model.KindEIP, key, m, cloneEIP, func(_ *model.State, e *model.EIP) error {
		e.Limits = nil
		return nil
	})
}

// AddPackageEIP adds a member to bandwidth package key.
func (c *Core) AddPackageEIP(ctx context.Context, key string, m IfMatch, pe model.PackageEIP) (Written, error) {
	return modify(c, ctx, model.KindBandwidthPackage, key, m, clonePackage, func(_ *model.State, p *model.BandwidthPackage) error {
		return addPackageMember(p, pe)
	})
}

// RemovePackageEIP removes member addr from bandwidth package key.
func (c *Core) RemovePackageEIP(ctx context.Context, key string, m IfMatch, addr netip.Addr) (Written, error) {
	return modify(c, ctx, model.KindBandwidthPackage, key, m, clonePackage, func(_ *model.State, p *model.BandwidthPackage) error {
		return removePackageMember(p, addr)
	})
}

// AddZoneRecord adds a static record to DNS zone key.
func (c *Core) AddZoneRecord(ctx context.Context, key string, m IfMatch, rec model.ZoneRecord) (Written, error) {
	return modify(c, ctx, model.KindDNSZone, key, m, cloneZone, func(_ *model.State, z *model.DNSZone) error {
		return addZoneRecordTo(z, rec)
	})
}

// AddGSLBTarget adds a target to GSLB record key.
func (c *Core) AddGSLBTarget(ctx context.Context, key string, m IfMatch, tg model.GSLBTarget) (Written, error) {
	return modify(c, ctx, model.KindGSLBRecord, key, m, cloneGSLBRecord, func(_ *model.State, g *model.GSLBRecord) error {
		return addGSLBTargetTo(g, tg)
	})
}

// RemoveGSLBTarget removes the target with vip from GSLB record key.
func (c *Core) RemoveGSLBTarget(ctx context.Context, key string, m IfMatch, vip netip.Addr) (Written, error) {
	return modify(c, ctx, model.KindGSLBRecord, key, m, cloneGSLBRecord, func(_ *model.State, g *model.GSLBRecord) error {
		return removeGSLBTargetFrom(g, vip)
	})
}

// AddGuest adds a guest to host key.
func (c *Core) AddGuest(ctx context.Context, key string, m IfMatch, g model.Guest) (Written, error) {
	return modify(c, ctx, model.KindHost, key, m, cloneHost, func(_ *model.State, h *model.Host) error {
		return addGuestTo(h, g)
	})
}

// RemoveGuest removes guest name from host key (removeGuestFrom).
func (c *Core) RemoveGuest(ctx context.Context, key string, m IfMatch, name string) (Written, error) {
	return modify(c, ctx, model.KindHost, key, m, cloneHost, func(st *model.State, h *model.Host) error {
		return removeGuestFrom(st, h, name)
	})
}

// modifyService changes service key by a rule; the result is completed
// with its defaults.
func (c *Core) modifyService(ctx context.Context, key string, m IfMatch, change func(v *model.Service) error) (Written, error) {
	return modify(c, ctx, model.KindService, key, m, cloneService, func(_ *model.State, v *model.Service) error {
		if err := change(v); err != nil {
			return err
		}
		v.Defaults()
		return nil
	})
}

// AddBackend adds a backend to a pool of service key.
func (c *Core) AddBackend(ctx context.Context, key string, m IfMatch, pool string, b model.Backend) (Written, error) {
	return c.modifyService(ctx, key, m, func(v *model.Service) error { return addBackendTo(v, pool, b) })
}

// RemoveBackend removes a backend (by key) from a pool of service key.
func (c *Core) RemoveBackend(ctx context.Context, key string, m IfMatch, pool, backend string) (Written, error) {
	return c.modifyService(ctx, key, m, func(v *model.Service) error { return removeBackendFrom(v, pool, backend) })
}

// SetWeight sets the weight of a backend of service key (0 drains it).
func (c *Core) SetWeight(ctx context.Context, key string, m IfMatch, pool, backend string, w uint32) (Written, error) {
	return c.modifyService(ctx, key, m, func(v *model.Service) error { return setBackendWeight(v, pool, backend, w) })
}
