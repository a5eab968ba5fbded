package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/gslbplan"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/placement"
	"github.com/azgate/azgate/internal/store"
)

// view is the controller's copy of the desired state and the revision of
// the last commit it reflects. Objects in it are never modified in place:
// a change replaces them, so a reader may keep an object after unlocking.
type view struct {
	// applyMu is held by whatever changes st apart from planning: the
	// watch (handle) and a write from its planning to the end of its
	// commit. A write releases mu while it commits, so readers keep
	// serving the last committed state; holding applyMu meanwhile keeps
	// the watch from showing half of a commit that the store splits into
	// several transactions. Lock order: applyMu, then mu.
	applyMu sync.Mutex
	mu      sync.RWMutex
	st      *model.State
	rev     int64
	changed chan struct{} // closed (and replaced) whenever rev moves
	// revs is every object's mod revision, its ETag (docs/api.md,
	// "Concurrent edits"): kept with st by the watch and by the
	// controller's own commits.
	revs store.Revisions

	ready     chan struct{} // closed by the first load
	readyOnce sync.Once

	// Copies for metrics and status, which must not wait behind a long
	// write holding mu.
	pubRev   atomic.Int64
	pubCount []atomic.Int64 // by model.Kinds index

	// onServices, if set, is called (with mu held; it must not block)
	// when a change from the watch touches services or health objects,
	// and after every resync.
	onServices func()

	// staleReloads counts full reloads ignored for being older than the
	// view; log (if set) says so.
	staleReloads atomic.Int64
	log          *slog.Logger
}

func newView() *view {
	return &view{st: model.NewState(), revs: store.Revisions{}, changed: make(chan struct{}), ready: make(chan struct{}),
		pubCount: make([]atomic.Int64, len(model.Kinds))}
}

// handle is the store.Handler feeding the view. A resync replaces the
// whole view, unless it is older than the view: a reload served by a
// lagging etcd member (or racing the controller's own commit) must not
// take back what the view already showed; the watch that follows it
// replays what came after, and the changes the view already has are
// skipped. Other changes are applied unless the view already has them: the
// controller's own commits are applied before the watch reports them.
func (v *view) handle(st *model.State, rev int64, events []store.Event, resync bool) {
	v.handleRevs(st, nil, rev, events, resync)
}

// handleRevs is handle with the objects' revisions (store.RevHandler):
// revs is read on a resync only, events carry their own.
func (v *view) handleRevs(st *model.State, revs store.Revisions, rev int64, events []store.Event, resync bool) {
	v.applyMu.Lock()
	defer v.applyMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if resync && rev < v.rev {
		v.staleReloads.Add(1)
		if v.log != nil {
			v.log.Warn("ignoring a reload older than the view (a lagging store member, or the store was reset: then restart the controller)",
				"reload_rev", rev, "view_rev", v.rev)
		}
		return
	}
	if resync {
		v.st = st.Clone() // Follow keeps changing st (and revs)
		v.revs = revs.Clone()
		v.setRev(rev)
		v.readyOnce.Do(func() { close(v.ready) })
		if v.onServices != nil {
			v.onServices()
		}
		return
	}
	latest := v.rev
	for _, e := range events {
		if e.Rev <= v.rev {
			continue
		}
		if (e.Kind == model.KindService || e.Kind == model.KindHealth) && v.onServices != nil {
			v.onServices()
		}
		if e.Obj == nil {
			v.st.Remove(e.Kind, e.Key)
			v.revs.Delete(e.Kind, e.Key)
		} else {
			v.st.Set(e.Obj)
			v.revs.Set(e.Kind, e.Key, e.Rev)
		}
		latest = max(latest, e.Rev)
	}
	if latest != v.rev {
		v.setRev(latest)
	}
}

// setRev moves the revision and wakes waiters; v.mu must be held.
func (v *view) setRev(rev int64) {
	v.rev = rev
	close(v.changed)
	v.changed = make(chan struct{})
	v.publish()
}

// publish copies the revision and object counts for lock-free readers;
// v.mu must be held.
func (v *view) publish() {
	v.pubRev.Store(v.rev)
	for i, k := range model.Kinds {
		v.pubCount[i].Store(int64(v.st.Len(k)))
	}
}

func (v *view) revision() int64 { return v.pubRev.Load() }

func (v *view) counts() map[string]int {
	m := make(map[string]int, len(model.Kinds))
	for i, k := range model.Kinds {
		m[k] = int(v.pubCount[i].Load())
	}
	return m
}

func (v *view) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-v.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("no state after %v", timeout)
	}
}

// waitFor waits until the view reflects revision rev.
func (v *view) waitFor(ctx context.Context, rev int64, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		v.mu.RLock()
		cur, ch := v.rev, v.changed
		v.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("the controller's view is at revision %d, not %d, after %v", cur, rev, timeout)
		}
	}
}

// txn is one write being planned on the view: the changes are applied to
// the state as they are made, with what undoes them and the store
// operations that commit them.
type txn struct {
	st   *model.State
	revs store.Revisions // the view's: read only while planning
	undo []func()
	ops  []store.Op
	objs []model.Object // per op: the object stored, nil for a delete (see redo)
	// ifRev: objects the writer read at a revision (If-Match), by
	// kind/key; their ops are committed on condition (store.Op.IfRev).
	ifRev map[[2]string]int64
	// The guards (guard.go): force says the writer does what they
	// refuse; refusals and warnings are what they found.
	force       bool
	refusals    []string
	warnings    []string
	ruleWork    int  // checkRule's, bounded by maxRuleWork
	ruleStopped bool // checkRule's budget is spent
}

// require fails with a 412 unless the object is at the revision a client
// read (m from its If-Match header; a zero m requires nothing), and makes
// the commit check it again in the store: the view and the store agree
// at the revision planned on, and the store's compare catches writes that
// went past the controller. Plan functions call it before their change.
func (t *txn) require(kind, key string, m IfMatch) error {
	if m.none() {
		return nil
	}
	cur := t.revs.Get(kind, key)
	if !m.matches(cur) {
		return &RevisionError{Kind: kind, Key: key, Current: cur, Sent: m.raw}
	}
	if cur > 0 {
		if t.ifRev == nil {
			t.ifRev = map[[2]string]int64{}
		}
		t.ifRev[[2]string{kind, key}] = cur
	}
	return nil
}

// conditions marks the ops of the objects require checked as conditional.
func (t *txn) conditions() {
	for i := range t.ops {
		if r, ok := t.ifRev[[2]string{t.ops[i].Kind, t.ops[i].Key}]; ok {
			t.ops[i].IfRev = r
		}
	}
}

// undoAll takes the changes back out of the state but keeps the ops (and
// objects) to commit.
func (t *txn) undoAll() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo = nil
}

// redo applies the committed ops to st and their revisions to revs, as
// the watch would (Set and Remove: the references were checked when
// planning, against the same state).
func (t *txn) redo(st *model.State, revs store.Revisions) {
	for i, op := range t.ops {
		if o := t.objs[i]; o != nil {
			st.Set(o)
			revs.Set(op.Kind, op.Key, op.Rev)
		} else {
			st.Remove(op.Kind, op.Key)
			revs.Delete(op.Kind, op.Key)
		}
	}
}

// refs are the objects the ops write (the primary ones: a txn holds no
// copies, see commitOps).
func (t *txn) refs() []placement.Ref {
	refs := make([]placement.Ref, len(t.ops))
	for i, op := range t.ops {
		refs[i] = placement.Ref{Kind: op.Kind, Key: op.Key}
	}
	return refs
}

// copies are the scope copies the txn's change adds, rewrites and
// removes (placement.Diff: puts, then deletes). It is called after
// undoAll, with the view's applyMu held and mu (the lock of t.st) not:
// the affected objects' scopes are taken before the change (readers go
// on meanwhile), then the change is put in again (with Set and Remove,
// as redo does) to take them after it, and taken out again (readers
// wait: an edge set change takes every object, 0.5 s of CPU at 100k
// EIPs).
//
// With copies lingering (ling, linger.go) or a grace set (start), the ops
// are placement.Linger's: a copy leaving a set's scope is kept, and the
// lingering ones the change touches are kept current; the change says
// what to record once the commit went in.
func (t *txn) copies(mu *sync.RWMutex, related placement.Snapshot, ling placement.Lingering, start bool) ([]store.Op, placement.LingerChange, error) {
	changed := t.refs()
	mu.RLock()
	before, err := placement.Take(t.st, changed, related)
	mu.RUnlock()
	if err != nil {
		return nil, placement.LingerChange{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	type prev struct {
		o   model.Object
		had bool
	}
	olds := make(map[placement.Ref]prev, len(changed))
	order := make([]placement.Ref, 0, len(changed))
	for i, r := range changed {
		if _, ok := olds[r]; !ok {
			o, had := t.st.Get(r.Kind, r.Key)
			olds[r] = prev{o, had}
			order = append(order, r)
		}
		if o := t.objs[i]; o != nil {
			t.st.Set(o)
		} else {
			t.st.Remove(r.Kind, r.Key)
		}
	}
	after, err := placement.Take(t.st, changed, before)
	for i := len(order) - 1; i >= 0; i-- {
		r := order[i]
		if p := olds[r]; p.had {
			t.st.Set(p.o)
		} else {
			t.st.Remove(r.Kind, r.Key)
		}
	}
	if err != nil {
		return nil, placement.LingerChange{}, err
	}
	ops := placement.Diff(before, after, changed)
	if !start && len(ling) == 0 {
		return ops, placement.LingerChange{}, nil
	}
	ops, lc := placement.Linger(before, after, changed, ops, ling, start)
	return ops, lc, nil
}

// commitOps is what a write commits: the copies placement.Diff puts,
// then the primary ops, then the copies it deletes. A commit larger than
// one transaction is applied chunk by chunk (store.Commit), and in that
// order a scope gets an object's new copy before anything is taken from
// another one (a pulled-out EIP is in its dedicated set before its prefix
// set lets it go). The last op is a primary one all the same: every
// controller's view follows the primary keys only, and a last transaction
// of copies alone would move the commit marker to a revision at which no
// view sees an event (their next commit would conflict and wait for it in
// vain); so with copies to delete, the last primary op goes after them.
func commitOps(primary, copies []store.Op) []store.Op {
	if len(copies) == 0 {
		return primary
	}
	puts := 0
	for puts < len(copies) && copies[puts].Value != nil {
		puts++
	}
	dels := copies[puts:]
	ops := make([]store.Op, 0, len(copies)+len(primary))
	ops = append(ops, copies[:puts]...)
	if len(dels) == 0 {
		return append(ops, primary...)
	}
	ops = append(ops, primary[:len(primary)-1]...)
	ops = append(ops, dels...)
	return append(ops, primary[len(primary)-1])
}

// committed copies the revisions Commit set on the committed ops (built
// by commitOps from t.ops) back to t.ops, for redo.
func (t *txn) committed(ops []store.Op) {
	i := 0
	for _, op := range ops {
		if op.Scope == "" {
			t.ops[i].Rev = op.Rev
			i++
		}
	}
}

// put stores o, unless it is the same as the stored object, and says
// whether it was created, updated or unchanged.
// A secret given as model.RedactedSecret keeps the stored one
// (model.KeepSecrets).
func (t *txn) put(o model.Object) (string, error) {
	kind := model.KindOf(o)
	old, had := t.st.Get(kind, o.Key())
	if err := model.KeepSecrets(o, old); err != nil {
		return "", invalid(kind, o.Key(), err)
	}
	val, err := store.Encode(o)
	if err != nil {
		return "", fmt.Errorf("encoding %s %q: %w", model.Singular(kind), o.Key(), err)
	}
	if had {
		if b, err := store.Encode(old); err == nil && bytes.Equal(b, val) {
			return api.Unchanged, nil
		}
	}
	t.guardPut(old, o)
	undo, err := t.st.Put(o)
	if err != nil {
		return "", err
	}
	if err := checkCompiles(t.st, o); err != nil {
		undo()
		return "", err
	}
	t.undo = append(t.undo, undo)
	t.ops = append(t.ops, store.Op{Kind: kind, Key: o.Key(), Value: val})
	t.objs = append(t.objs, o)
	if had {
		return api.Updated, nil
	}
	return api.Created, nil
}

// delete removes an object nothing refers to.
func (t *txn) delete(kind, key string) error {
	t.guardDelete(kind, key)
	undo, err := t.st.Delete(kind, key)
	if err != nil {
		return err
	}
	t.undo = append(t.undo, undo)
	t.ops = append(t.ops, store.Op{Kind: kind, Key: key})
	t.objs = append(t.objs, nil)
	return nil
}

// setHealth stores a Health object (the controller's own verdict: no
// reference checks, see model.State.Set) unless it equals the stored one.
func (t *txn) setHealth(h *model.Health) error {
	val, err := store.Encode(h)
	if err != nil {
		return fmt.Errorf("encoding the health of service %q: %w", h.Service, err)
	}
	old, had := t.st.Health[h.Service]
	if had {
		if b, err := store.Encode(old); err == nil && bytes.Equal(b, val) {
			return nil
		}
	}
	t.st.Set(h)
	t.undo = append(t.undo, func() {
		if had {
			t.st.Set(old)
		} else {
			t.st.Remove(model.KindHealth, h.Service)
		}
	})
	t.ops = append(t.ops, store.Op{Kind: model.KindHealth, Key: h.Service, Value: val})
	t.objs = append(t.objs, h)
	return nil
}

// removeHealth deletes a service's Health object, if there is one.
func (t *txn) removeHealth(service string) {
	old, had := t.st.Health[service]
	if !had {
		return
	}
	t.st.Remove(model.KindHealth, service)
	t.undo = append(t.undo, func() { t.st.Set(old) })
	t.ops = append(t.ops, store.Op{Kind: model.KindHealth, Key: service})
	t.objs = append(t.objs, nil)
}

func (t *txn) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo, t.ops, t.objs = nil, nil, nil
}

// errDryRun ends the plan of a dry run (WriteOptions.DryRun) once it was
// checked: nothing is committed.
var errDryRun = errors.New("dry run: nothing was written")

// dryRunRefused is errDryRun of a dry run that the guards refuse: the
// write would fail with a ForceError; the dry run answers with its plan
// and these refusals.
type dryRunRefused struct{ refusals []string }

func (e *dryRunRefused) Error() string {
	return errDryRun.Error() + "; " + (&ForceError{Reasons: e.refusals}).Error()
}

func (e *dryRunRefused) Is(target error) bool { return target == errDryRun }

// refusalsOf returns the refusals of a dry run's error (nil for none),
// at most maxRefusals of them, then a line counting the others.
func refusalsOf(err error) []string {
	var d *dryRunRefused
	if !errors.As(err, &d) {
		return nil
	}
	rs := firstN(d.refusals, maxRefusals)
	if len(d.refusals) > len(rs) {
		rs = append(rs[:len(rs):len(rs)], fmt.Sprintf("and %d more", len(d.refusals)-len(rs)))
	}
	return rs
}

// Write retries after a conflict.
const (
	maxAttempts  = 5
	catchUpLimit = 10 * time.Second
)

// errStore marks failures of the store itself (503 to the client).
type errStore struct{ err error }

func (e *errStore) Error() string { return e.err.Error() }
func (e *errStore) Unwrap() error { return e.err }

// write runs plan against the view and commits what it changed (see the
// package doc). plan runs again from scratch after a conflict, so it must
// not keep results of an earlier run. It returns the revision after the
// commit, or the view's revision when plan changed nothing.
//
// Readers wait for the planning only, never for the store: the planned
// changes are taken back out of the view before the commit and put in
// again once it succeeded, so while the commit is in flight GETs serve the
// last committed state (TestReadDuringCommit).
func (s *Core) write(ctx context.Context, plan func(t *txn) error) (int64, error) {
	rev, _, err := s.writeW(ctx, plan)
	return rev, err
}

// writeW is write also returning the guards' warnings. With
// WriteOptions.DryRun (from ctx) it plans and checks the change, then
// takes it back and fails with errDryRun.
func (s *Core) writeW(ctx context.Context, plan func(t *txn) error) (int64, []string, error) {
	opts := writeOptions(ctx)
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	v := s.view
	// lease: the store lease of the copies this write starts to keep
	// after a move (linger.go), taken once they appear.
	var lease store.LeaseID
	for attempt := 1; ; attempt++ {
		v.applyMu.Lock()
		v.mu.Lock()
		t := &txn{st: v.st, revs: v.revs, force: opts.Force}
		err := planned(t, plan, func() {
			v.mu.Unlock()
			v.applyMu.Unlock()
		})
		if err == nil {
			err = t.checkRefusals()
		}
		var fe *ForceError
		if opts.DryRun && errors.As(err, &fe) {
			// A dry run shows the plan and what the guards refuse.
			err = &dryRunRefused{refusals: fe.Reasons}
		} else if err == nil && opts.DryRun {
			err = errDryRun
		}
		if err != nil {
			t.rollback()
			rev := v.rev
			v.mu.Unlock()
			v.applyMu.Unlock()
			if errors.Is(err, errDryRun) {
				return rev, t.warnings, err
			}
			return 0, nil, err
		}
		warnings := t.warnings
		base := v.rev
		if len(t.ops) == 0 {
			t.undoAll()
			v.mu.Unlock()
			v.applyMu.Unlock()
			return base, warnings, nil
		}
		// The objects related to the change in the state after it (the
		// host an EIP is bound to by it): taken before it too, so the
		// copies they already have are not written again.
		related := placement.Related(t.st, t.refs())
		t.undoAll()
		t.conditions()
		v.mu.Unlock()
		copies, lc, err := t.copies(&v.mu, related, s.linger.copies, s.cfg.MoveGrace > 0)
		if err != nil {
			v.applyMu.Unlock()
			return 0, nil, fmt.Errorf("computing the scope copies of the change (nothing was written): %w", err)
		}
		if len(lc.Start) > 0 && lease == 0 {
			if lease, err = s.grantLinger(ctx); err != nil {
				v.applyMu.Unlock()
				s.metrics.commits.WithLabelValues("error").Inc()
				return 0, nil, &errStore{fmt.Errorf("%w (nothing was written)", err)}
			}
		}
		copies = s.linger.leased(copies, lc, lease)
		ops := commitOps(t.ops, copies)
		if s.beforeCommit != nil {
			s.beforeCommit(attempt)
		}
		start := time.Now()
		// The audit record goes last: in the change's last transaction.
		cops := ops
		actor, audited := actorOf(ctx)
		if audited {
			cops = append(ops[:len(ops):len(ops)], auditOp(actor, base, t.ops))
		}
		cctx, cancel := commitContext(ctx, len(cops))
		rev, err := s.commit(cctx, base, cops)
		cancel()
		s.metrics.commitSeconds.Observe(time.Since(start).Seconds())
		if audited {
			copy(ops, cops) // the revisions Commit set
		}
		if err == nil {
			t.committed(ops)
			s.countCopies("write", ops)
			s.recordLinger(lc, lease)
			v.mu.Lock()
			t.redo(v.st, v.revs) // applyMu held: v.st is still the state planned on
			v.setRev(rev)
			v.mu.Unlock()
			v.applyMu.Unlock()
			s.metrics.commits.WithLabelValues("ok").Inc()
			if s.health != nil && slices.ContainsFunc(t.ops, func(o store.Op) bool { return o.Kind == model.KindService }) {
				s.health.poke()
			}
			if audited && s.audited.Add(1)%s.auditTrimEvery() == 0 {
				s.wakeTrimmer()
			}
			return rev, warnings, nil
		}
		v.applyMu.Unlock()
		if rev != base {
			// Some of the commit's transactions went in: copies may be
			// in the store without their primary write (or stale ones
			// left), whatever happens next.
			s.repairCopiesLater()
		}
		var re *store.RevisionError
		if errors.As(err, &re) {
			// The object changed past the view (a write that did not go
			// through a controller, or the view lags): the client's
			// revision is stale all the same. Nothing was written.
			s.metrics.commits.WithLabelValues("precondition").Inc()
			return 0, nil, &RevisionError{Kind: re.Kind, Key: re.Key, Current: re.Current}
		}
		if errors.Is(err, store.ErrLeaseNotFound) && attempt < maxAttempts {
			// A lingering copy's lease ended before this controller
			// deleted it (its expiry failed past the margin): etcd
			// deleted the copies; forget them and plan again (with a
			// new lease, in case it was this write's).
			n := s.linger.dropLeased(ops, lease)
			lease = 0
			s.metrics.commits.WithLabelValues("lease").Inc()
			s.log.Warn("scope copies: a lease of copies kept after a move ended before their grace was over; forgetting them", "copies", n, "err", err)
			continue
		}
		if !errors.Is(err, store.ErrConflict) {
			s.metrics.commits.WithLabelValues("error").Inc()
			s.log.Error("commit failed; reloading the state", "ops", len(t.ops), "err", err)
			s.forceReload()
			s.repairCopiesLater()
			return 0, nil, &errStore{fmt.Errorf("the store did not take the change (it may have been partly written; the controller reloads the state): %w", err)}
		}
		s.metrics.commits.WithLabelValues("conflict").Inc()
		s.metrics.conflicts.Inc()
		if attempt == maxAttempts {
			return 0, nil, &errStore{fmt.Errorf("gave up after %d conflicting concurrent writes; retry", attempt)}
		}
		latest, err := s.store.CommitRevision(ctx)
		if err != nil {
			return 0, nil, &errStore{err}
		}
		s.log.Info("commit conflict; catching up and retrying", "attempt", attempt, "rev", latest)
		if err := v.waitFor(ctx, latest, catchUpLimit); err != nil {
			return 0, nil, &errStore{err}
		}
	}
}

// planned runs plan on t; if it panics, the changes it made are taken
// back out of the view and unlock unlocks it before the panic goes on
// (net/http recovers it: a view left changed and locked would hang every
// later read and write).
func planned(t *txn, plan func(t *txn) error, unlock func()) error {
	ok := false
	defer func() {
		if !ok {
			t.rollback()
			unlock()
		}
	}()
	err := plan(t)
	ok = true
	return err
}

// commitContext gives a commit time in proportion to its size and keeps it
// going if the client goes away: an interrupted commit would leave the
// store partly written.
func commitContext(ctx context.Context, ops int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second+time.Duration(ops)*100*time.Microsecond)
}

// checkCompiles refuses a DNS zone or GSLB record the GSLB would not serve:
// the zone, with every record naming it, is compiled as the gslb role
// compiles it (docs/gslb.md, "Objects").
func checkCompiles(st *model.State, o model.Object) error {
	switch v := o.(type) {
	case *model.DNSZone:
		return gslbplan.CheckZone(st, v.Name)
	case *model.GSLBRecord:
		return gslbplan.CheckRecord(st, v)
	}
	return nil
}
