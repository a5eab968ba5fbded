// Package store keeps azgate's desired state in etcd: one key per object
// under /azgate/v1/KIND/KEY holding its JSON. Writes are optimistic
// transactions guarded by the revision the writer's view was taken at;
// readers load the whole state at one revision and then follow the watch
// stream (see Follow), so nothing polls. Edges and agents may follow a
// share of the region instead: scope.go.
package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/azgate/azgate/internal/model"
)

// Key prefixes.
const (
	Root       = "/azgate/v1/"
	StatusRoot = "/azgate/status/"
	// CommitKey is rewritten by every commit, so "nothing changed since
	// revision R" is one key's mod revision compared with R (a compare over
	// the whole prefix would cost a scan of every object per write).
	CommitKey = "/azgate/meta/commit"
)

// TxnBytes bounds the keys and values written in one transaction, under
// etcd's default request limit of 1.5 MiB (an object larger than it goes
// alone; the embedded server accepts up to 32 MiB).
const TxnBytes = 1 << 20

// ErrConflict means the state changed since the writer's revision.
var ErrConflict = errors.New("store: state changed concurrently")

// Key is the etcd key of an object.
func Key(kind, key string) string { return Root + kind + "/" + key }

// ParseKey splits an etcd key into kind and object key. A guest copy
// (model.KindGuestCopy) exists only under a scope (ParseScopeKey): under
// Root it names no object, so an edge following the whole store never
// routes by one written there past the controller.
func ParseKey(k string) (kind, key string, ok bool) {
	rest, ok := strings.CutPrefix(k, Root)
	if !ok {
		return "", "", false
	}
	kind, key, ok = strings.Cut(rest, "/")
	return kind, key, ok && key != "" && kind != model.KindGuestCopy
}

// Store is a client of the state store.
type Store struct {
	Client *clientv3.Client
	// TxnOps bounds the operations in one transaction (etcd's
	// --max-txn-ops, 128 by default; the embedded server allows more).
	TxnOps int
	Log    *slog.Logger
	auth   ClientAuth  // to explain authentication errors
	tls    *tls.Config // as given to the client (nil: none)

	// LoadJitter spreads full loads: a follower (FollowSink, FollowScope
	// and what uses them) waits a random duration in [0, LoadJitter)
	// before each, so a region-wide restart does not load the store from
	// every node at once. 0: no wait.
	LoadJitter time.Duration
	// FreeAfterLoad: after each full load a follower has committed,
	// collect the garbage and return the free memory to the OS
	// (debug.FreeOSMemory). A load allocates several times what it
	// leaves (pages, decoding); without this a follower at rest keeps
	// the heap the load grew to until later allocations trigger
	// collections. For a process following one share (edge, agent); a
	// process of many followers would collect once per follower.
	FreeAfterLoad bool
	// LoadGCPercent, if above 0, is the garbage collector's percent
	// (debug.SetGCPercent, GOGC) while a follower's full load runs; the
	// previous one is restored after it. A load allocates several times
	// the index it leaves (pages, decoding) while that index grows, and
	// at the default 100 the heap may grow to twice what is live before
	// each collection: the process's peak RSS. A lower percent collects
	// more often during the load, for more of the load's CPU. Ignored
	// when the environment sets GOGC (the operator's choice wins). For a
	// process following one share (edge, agent), as FreeAfterLoad; loads
	// that overlap share one lowering (the first sets it, the last
	// restores it).
	LoadGCPercent int
	drawJitter    func(time.Duration) time.Duration // tests: nil is rand.N
	// loadPageBytes is the page budget of full loads (0: from the span,
	// see LoadPageBytes; tests make it small).
	loadPageBytes int
	// onPage (tests) is called with each page: the span's prefix, its
	// keys, and their size as the page budget counts it.
	onPage func(prefix string, keys, bytes int)

	invalidOnce sync.Once
	invalid     *Invalid // what Follow refused
}

// Options to connect.
type Options struct {
	Endpoints []string
	TxnOps    int
	Log       *slog.Logger
	// Auth holds the TLS and user/password settings (none: plaintext,
	// anonymous, as the embedded etcd's socket in its 0700 dir is).
	Auth ClientAuth
	// LoadJitter, FreeAfterLoad and LoadGCPercent are the Store's (0,
	// false, 0: none).
	LoadJitter    time.Duration
	FreeAfterLoad bool
	LoadGCPercent int
}

// NodeLoadGCPercent is the LoadGCPercent of the edge role (and of the
// fleet bench's edge children, which measure it): docs/scale.md, "Memory
// of one edge and of an agent process".
const NodeLoadGCPercent = 50

// AgentLoadGCPercent is the agent role's LoadGCPercent (and the fleet
// bench's agent children's). An agent loads one host's share: a heap of a
// few MB, on which 50 let the load's garbage (decoded pages, the
// reconciler's plan) add up to half of it again, while a collection
// costs well under a millisecond; at 10 the process's peak RSS (VmHWM)
// is ~1 MB lower, the load's CPU within its spread (docs/scale.md, "An
// agent's peak"). GC CPU grows with what a load allocates over the
// percent, so an edge's load of 100k EIPs keeps NodeLoadGCPercent.
const AgentLoadGCPercent = 10

// Check makes Connect's checks of o without connecting: the endpoints'
// forms, the TLS files, the user's password file (a role's
// --check-config).
func (o Options) Check() error {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	_, _, err := o.check()
	return err
}

func (o Options) check() (*tls.Config, string, error) {
	if len(o.Endpoints) == 0 {
		return nil, "", errors.New("store: no etcd endpoints")
	}
	if err := checkEndpoints(o.Endpoints, o.Auth, o.Log); err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	tc, err := o.Auth.tlsConfig()
	if err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	pw, err := o.Auth.password()
	if err != nil {
		return nil, "", fmt.Errorf("store: %w", err)
	}
	return tc, pw, nil
}

// Connect opens a client to etcd. Endpoints may be host:port, http(s) URLs
// or unix(s):///path sockets. With TLS settings every endpoint must be
// https:// (or unixs://); a plaintext endpoint off this machine is
// logged as a warning.
func Connect(o Options) (*Store, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("store: no etcd endpoints")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.TxnOps <= 0 {
		o.TxnOps = 128
	}
	tc, pw, err := o.check()
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:          o.Endpoints,
		DialTimeout:        5 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallRecvMsgSize: 256 << 20,
		MaxCallSendMsgSize: 64 << 20,
		TLS:                tc,
		Username:           o.Auth.User,
		Password:           pw,
	})
	if err != nil {
		return nil, fmt.Errorf("store: connect to %s: %w", strings.Join(o.Endpoints, ","), explain(err, o.Auth))
	}
	return &Store{Client: cli, TxnOps: o.TxnOps, Log: o.Log, auth: o.Auth, tls: tc, LoadJitter: o.LoadJitter, FreeAfterLoad: o.FreeAfterLoad, LoadGCPercent: o.LoadGCPercent}, nil
}

// Close closes the client.
func (s *Store) Close() error { return s.Client.Close() }

// Ping checks the store answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := s.Client.Get(ctx, Root+"ping", clientv3.WithCountOnly())
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// gRPC retries a failed TLS handshake until the deadline and
			// keeps the reason to itself: ask the endpoints directly.
			if terr := probeTLS(s.Client.Endpoints(), s.tls); terr != nil {
				err = fmt.Errorf("%w: %w", err, terr)
			}
		}
		return fmt.Errorf("store: %w", explain(err, s.auth))
	}
	return nil
}

// explain adds what to do to the errors a missing or wrong credential
// gives, which etcd and gRPC word for their own developers.
func explain(err error, a ClientAuth) error {
	msg := err.Error()
	switch {
	case errors.Is(err, rpctypes.ErrUserEmpty), strings.Contains(msg, "user name is empty"):
		return credErr("etcd requires authentication: give --etcd-user and --etcd-password-file (%w)", err)
	case errors.Is(err, rpctypes.ErrAuthFailed), strings.Contains(msg, "authentication failed"):
		return credErr("etcd refused user %q: wrong user or password (%w)", a.User, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return credErr("etcd user %q may not read or write azgate's keys: grant it a role with readwrite on /azgate/ (%w)", a.User, err)
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"):
		return credErr("etcd requires a client certificate: give --etcd-cert and --etcd-key signed by its trusted CA (%w)", err)
	case strings.Contains(msg, "x509:"), strings.Contains(msg, "tls:"):
		return credErr("TLS with etcd failed: check --etcd-cacert and the endpoint's host name (%w)", err)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return credErr("etcd answers in plaintext: use http:// without TLS settings (%w)", err)
	case strings.Contains(msg, "http2: frame too large"), strings.Contains(msg, "malformed HTTP response"):
		return credErr("etcd expects TLS: use https:// with --etcd-cacert (%w)", err)
	}
	return err
}

// CredentialError is a refusal of the client's credentials or TLS
// settings: a configuration error, not worth retrying.
type CredentialError struct{ err error }

func credErr(format string, args ...any) error {
	return &CredentialError{fmt.Errorf(format, args...)}
}

func (e *CredentialError) Error() string { return e.err.Error() }
func (e *CredentialError) Unwrap() error { return e.err }

// Encode serializes an object for the store. model.DecodeStored reads
// back fastest what json.Marshal wrote (it compares its own json.Marshal
// encoding with what it read, and runs the full key checks only when they
// differ): another encoding here stays correct but makes every load slow.
func Encode(o model.Object) ([]byte, error) { return json.Marshal(o) }

// loadPage is the most keys a full load asks for at once. etcd counts
// every key from a page's start to the end of the range for each page, so
// small pages make loading N keys cost O(N²/page): with 10,000 a million
// EIPs took 7s to read, with 50,000 under one.
const loadPage = 50000

// LoadPageBytes is the most a full load's page aims at, in keys and
// values: the next page asks for as many keys as fit at the mean size of
// those read so far (at most loadPage). A page is held whole three times
// while it is read (gRPC's receive buffer, the decoded response, the
// objects decoded from it), so it sets much of a follower's peak memory
// during a load.
//
// Pages are smaller for smaller spans (pageSizer): a span's pages aim at
// 1/loadPages of its size, between LoadPageMinBytes and LoadPageBytes.
// etcd 3.4 counts every key from a page's start to the span's end for
// each page, so a span read in P pages costs about N*P/2 key visits:
// P <= loadPages keeps that linear in N while the pages are above the
// minimum, and a span large enough for LoadPageBytes pages (a million
// EIPs of a controller's load) is read as before. An edge of a 100k-EIP
// set reads its ~36 MB of copies in pages of ~1 MiB (TestLoadPageBound)
// where it read 4 MiB pages before (its peak RSS then ~9 MB higher in
// the fleet bench: docs/scale.md, "Load pages sized by the span").
const LoadPageBytes = 4 << 20

// LoadPageMinBytes is the least a page aims at (see LoadPageBytes): a
// round trip per 1 MiB costs little next to decoding it.
const LoadPageMinBytes = 1 << 20

// loadPages is how many pages a span is read in at most while its pages
// are between LoadPageMinBytes and LoadPageBytes.
const loadPages = 32

// kvOverhead is what a key-value costs beyond its key and value in a
// page (its revisions and protobuf framing), for the page budget.
const kvOverhead = 24

// pageSizer picks the key limit of a load's next page from the sizes of
// the keys read so far: budget bytes at their mean size, between 1 and
// loadPage keys. The first page, with no size known, is firstPage keys
// (fewer if 256 bytes a key would exceed the budget): a range of 50 kB
// hosts must not come as one page of budget/256 of them. budget 0 sizes
// the pages from the span (see LoadPageBytes): total is the count of
// keys in it the first page's response gave.
type pageSizer struct {
	budget      int
	keys, bytes int
	total       int64
}

const firstPage = 100

func (p *pageSizer) add(kv *mvccpb.KeyValue) {
	p.keys++
	p.bytes += len(kv.Key) + len(kv.Value) + kvOverhead
}

func (p *pageSizer) limit() int64 {
	budget := p.budget
	if budget <= 0 {
		budget = LoadPageBytes
		if p.keys > 0 {
			span := int64(p.bytes/p.keys) * p.total
			budget = int(min(max(span/loadPages, LoadPageMinBytes), LoadPageBytes))
		}
	}
	if p.keys == 0 {
		return int64(min(max(budget/256, 1), firstPage))
	}
	return int64(min(max(budget/max(p.bytes/p.keys, 1), 1), loadPage))
}

// Load reads the whole state at one revision, page by page. Values that
// do not decode are logged and skipped.
func (s *Store) Load(ctx context.Context) (*model.State, int64, error) {
	ss := &stateSink{st: model.NewState(), log: s.Log, invalid: &Invalid{Log: s.Log}}
	rev, err := s.loadInto(ctx, ss)
	if err != nil {
		return nil, 0, err
	}
	return ss.st, rev, nil
}

// loadInto streams every object at one revision into sink (Reset, then
// Put page by page) and returns the revision; the caller commits.
func (s *Store) loadInto(ctx context.Context, sink Sink) (int64, error) {
	return s.load(ctx, whole(), sink)
}

// span is a key range a follower loads or watches: its prefix, and how
// its keys name the objects handed to a Sink.
type span struct {
	prefix string
	parse  func(k string) (kind, key string, ok bool)
	// name is what a commit marker calls a transaction's writes under
	// prefix: the kind of a primary span, the scope of a copy span.
	name string
	// parts, if any, are prefixes under prefix (a scope's kinds) that a
	// full load reads as ranges of their own (scanParts).
	parts []string
}

// primary is the span of one kind's primary keys.
func primary(kind string) span { return span{prefix: Root + kind + "/", parse: ParseKey, name: kind} }

// feed is what a follower reads: the spans of a full load, the spans it
// then watches (every change of a loaded key must be in one of them, and
// no key in two), and whether a load waits for the layout marker.
type feed struct {
	load, watch []span
	layout      bool
	// marker: also watch the commit marker, so that a commit that
	// touched none of the spans still advances the revision committed
	// to the sink (see watch).
	marker bool
}

// whole is the feed of FollowSink: every kind loaded, all of Root
// watched.
func whole() feed {
	f := feed{watch: []span{{prefix: Root, parse: ParseKey}}}
	for _, k := range model.Kinds {
		f.load = append(f.load, primary(k))
	}
	return f
}

// layoutAt reads the layout marker: the revision read at, and whether
// the marker says Layout.
func (s *Store) layoutAt(ctx context.Context) (int64, bool, error) {
	resp, err := s.Client.Get(ctx, LayoutKey)
	if err != nil {
		return 0, false, fmt.Errorf("store: load: %w", err)
	}
	return resp.Header.Revision, len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == Layout, nil
}

// load streams f's spans at one revision into sink (Reset, then Put page
// by page) and returns the revision; the caller commits. A feed with
// layout gets ErrNoLayout, before sink is touched, while the marker is
// not Layout.
func (s *Store) load(ctx context.Context, f feed, sink Sink) (int64, error) {
	rev, marked, err := s.layoutAt(ctx)
	if err != nil {
		return 0, err
	}
	if f.layout && !marked {
		return 0, ErrNoLayout
	}
	sink.Reset()
	for _, sp := range f.load {
		err := s.scanParts(ctx, sp.prefix, sp.parts, rev, func(kv *mvccpb.KeyValue) {
			if kind, key, ok := sp.parse(string(kv.Key)); ok {
				sink.Put(kind, key, kv.Value, kv.ModRevision)
			} else {
				s.Log.Warn("store: ignoring a key that names no object", "key", string(kv.Key))
			}
		})
		if err != nil {
			return 0, err
		}
	}
	return rev, nil
}

// scan hands fn every key under prefix at revision rev, in pages of
// about s.loadPageBytes (0: sized from the span, pageSizer). fn must not
// keep kv (it may keep kv.Value): each one is dropped from its page once
// handed over, so that what a page holds is freed as it is decoded.
func (s *Store) scan(ctx context.Context, prefix string, rev int64, fn func(kv *mvccpb.KeyValue)) error {
	return s.scanRange(ctx, prefix, prefix, clientv3.GetPrefixRangeEnd(prefix), rev, fn)
}

// scanParts is scan with prefix's range cut at parts (prefixes under
// it): each part, and each gap between them and around them, is read as
// a range of its own, in key order, so every key under prefix is handed
// to fn once, as scan would. etcd 3.4 counts (and lists) every key from
// a page's start to its range's end for each page: a scope's copies read
// as one range of 200,000 EIPs and guest copies in 35 pages cost it 3.5
// million index entries, read kind by kind half as many, and a load of
// more pages no longer costs it more than the 4 MiB pages did.
//
// The first page is of the whole range, and the cut ranges start after
// it: a range that fits in one page (an agent's host scope, a small
// set's) is one request, not one per part and gap (27 for a scope).
func (s *Store) scanParts(ctx context.Context, prefix string, parts []string, rev int64, fn func(kv *mvccpb.KeyValue)) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	if len(parts) == 0 || end == "\x00" { // "\x00": no end (a prefix of 0xff bytes)
		return s.scanRange(ctx, prefix, prefix, end, rev, fn)
	}
	from, err := s.scanPages(ctx, prefix, prefix, end, rev, 1, fn)
	if err != nil || from == "" {
		return err
	}
	bounds := []string{prefix, end}
	for _, p := range parts {
		if strings.HasPrefix(p, prefix) && p != prefix {
			bounds = append(bounds, p, clientv3.GetPrefixRangeEnd(p))
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	for i := 0; i+1 < len(bounds) && bounds[i] < end; i++ {
		lo, hi := max(bounds[i], from), min(bounds[i+1], end)
		if lo >= hi {
			continue // read by the first page
		}
		if err := s.scanRange(ctx, prefix, lo, hi, rev, fn); err != nil {
			return err
		}
	}
	return nil
}

// scanRange is scan of the keys in [from, end), which lie under prefix.
func (s *Store) scanRange(ctx context.Context, prefix, from, end string, rev int64, fn func(kv *mvccpb.KeyValue)) error {
	_, err := s.scanPages(ctx, prefix, from, end, rev, 0, fn)
	return err
}

// scanPages is scanRange of at most pages pages (0: all of them): it
// returns the key the next page would start at, "" once the range is
// read to its end.
func (s *Store) scanPages(ctx context.Context, prefix, from, end string, rev int64, pages int, fn func(kv *mvccpb.KeyValue)) (string, error) {
	ps := pageSizer{budget: s.loadPageBytes}
	for page := 1; ; page++ {
		resp, err := s.Client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(ps.limit()), clientv3.WithRev(rev))
		if err != nil {
			return "", fmt.Errorf("store: load %s: %w", prefix, err)
		}
		if s.onPage != nil {
			b := 0
			for _, kv := range resp.Kvs {
				b += len(kv.Key) + len(kv.Value) + kvOverhead
			}
			s.onPage(prefix, len(resp.Kvs), b)
		}
		n := len(resp.Kvs)
		if n == 0 {
			return "", nil
		}
		if ps.keys == 0 {
			ps.total = resp.Count // the range's keys at rev (the first page's from is its start)
		}
		from = string(resp.Kvs[n-1].Key) + "\x00"
		for i, kv := range resp.Kvs {
			ps.add(kv)
			fn(kv)
			resp.Kvs[i] = nil
		}
		if !resp.More {
			return "", nil
		}
		if page == pages {
			return from, nil
		}
	}
}

// Op is one write: Value nil deletes.
type Op struct {
	// Scope "" writes the primary key Root+Kind+"/"+Key; otherwise the
	// copy ScopeKey(Scope, Kind, Key) (scope.go).
	Scope     string
	Kind, Key string
	Value     []byte
	// IfRev > 0 makes the write conditional: it is applied only if the
	// object's mod revision is still IfRev (the object's ETag, see
	// Revisions), and otherwise its transaction fails with a
	// *RevisionError.
	IfRev int64
	// Lease, if not 0, puts the key with that lease (store.Leases): etcd
	// deletes it when the lease ends, unless a later put without the
	// lease (which detaches it) came first. A put of a lease that ended
	// fails the transaction with ErrLeaseNotFound. Deletes ignore it.
	Lease LeaseID
	// Rev is set by Commit to the revision the op was committed at: the
	// object's new mod revision.
	Rev int64
	// Raw, if set, is the op's whole key, outside Root and ScopeRoot (an
	// audit record, AuditRoot): Scope, Kind and Key are then unused.
	Raw string
}

// Commit writes ops if no commit happened after rev, in
// transactions of at most TxnOps operations (each one atomic; a batch
// larger than one transaction is applied chunk by chunk). It returns the
// revision after the last chunk and sets every committed op's Rev.
//
// A chunk holding conditional ops (Op.IfRev) also compares their keys'
// mod revisions: if one differs, Commit returns a *RevisionError naming
// it (and not ErrConflict, even if the commit marker moved too: the
// object changed, so retrying the same write cannot succeed).
func (s *Store) Commit(ctx context.Context, rev int64, ops []Op) (int64, error) {
	return s.commit(ctx, rev, ops, false)
}

func (s *Store) commit(ctx context.Context, rev int64, ops []Op, markLayout bool) (int64, error) {
	if len(ops) == 0 {
		return rev, nil
	}
	markers := 1 // the commit marker, and the layout's (CommitMarked)
	if markLayout {
		markers = 2
	}
	for len(ops) > 0 {
		// At most TxnOps operations (with the markers) and
		// TxnBytes of keys and values: etcd refuses larger requests
		// (--max-request-bytes, 1.5 MiB by default).
		n, size := 0, 0
		for n < len(ops) && n < max(s.TxnOps-markers, 1) {
			sz := len(ScopeRoot) + len(ops[n].Raw) + len(ops[n].Scope) + len(ops[n].Kind) + len(ops[n].Key) + len(ops[n].Value) + 16
			if n > 0 && size+sz > TxnBytes {
				break
			}
			size += sz
			n++
		}
		chunk := ops[:n]
		ops = ops[n:]
		eops := make([]clientv3.Op, len(chunk))
		for i, o := range chunk {
			eops[i] = etcdOp(o)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(CommitKey), "<", rev+1)}
		var conds []int // indexes in chunk of the conditional ops
		var gets []clientv3.Op
		for i, o := range chunk {
			if o.IfRev > 0 {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(opKey(o)), "=", o.IfRev))
				conds = append(conds, i)
				gets = append(gets, clientv3.OpGet(opKey(o), clientv3.WithKeysOnly()))
			}
		}
		eops = append(eops, clientv3.OpPut(CommitKey, markerOf(chunk)))
		if markLayout && len(ops) == 0 { // the last transaction
			eops = append(eops, clientv3.OpPut(LayoutKey, Layout))
		}
		resp, err := s.Client.Txn(ctx).
			If(cmps...).
			Then(eops...).
			Else(gets...).Commit()
		if err != nil {
			return rev, fmt.Errorf("store: commit: %w", mapErr(err))
		}
		if !resp.Succeeded {
			for j, i := range conds {
				var cur int64
				if r := resp.Responses[j].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
					cur = r.Kvs[0].ModRevision
				}
				if cur != chunk[i].IfRev {
					return rev, &RevisionError{Kind: chunk[i].Kind, Key: chunk[i].Key, Want: chunk[i].IfRev, Current: cur}
				}
			}
			return rev, ErrConflict
		}
		rev = resp.Header.Revision
		for i := range chunk {
			chunk[i].Rev = rev
		}
	}
	return rev, nil
}

// etcdOp is o as an etcd put (with its lease, if any) or delete.
func etcdOp(o Op) clientv3.Op {
	if o.Value == nil {
		return clientv3.OpDelete(opKey(o))
	}
	if o.Lease != 0 {
		return clientv3.OpPut(opKey(o), string(o.Value), clientv3.WithLease(clientv3.LeaseID(o.Lease)))
	}
	return clientv3.OpPut(opKey(o), string(o.Value))
}

// CommitRevision returns the revision of the last commit (0 before the
// first): a writer that got ErrConflict waits until its view reaches it.
func (s *Store) CommitRevision(ctx context.Context) (int64, error) {
	resp, err := s.Client.Get(ctx, CommitKey)
	if err != nil {
		return 0, fmt.Errorf("store: read the commit marker: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}

// Sink receives the store's contents as raw values, for followers that
// keep their own (smaller) representation: a full load is Reset, Put for
// every object, Commit(rev, true); then each watched batch of changes is
// Put/Delete calls and Commit(rev, false). All calls come from one
// goroutine.
type Sink interface {
	Reset()
	Put(kind, key string, value []byte, rev int64) // rev: the object's mod revision
	Delete(kind, key string, rev int64)
	Commit(rev int64, resync bool)
}

// FollowSink streams the store into sink until ctx ends; a compacted or
// broken watch leads to a full reload.
func (s *Store) FollowSink(ctx context.Context, sink Sink) error {
	return s.follow(ctx, whole(), sink)
}

// follow loads f into sink and then watches it, until ctx ends: a failed
// load is retried with backoff, a compacted or broken watch leads to a
// full reload. Every load waits a random share of LoadJitter first.
func (s *Store) follow(ctx context.Context, f feed, sink Sink) error {
	backoff := 100 * time.Millisecond
	var warned time.Time // the last ErrNoLayout warning
	for s.jitter(ctx) {
		// The GC percent is lowered for the load and the commit that
		// applies it (an edge programs its maps then).
		restore := s.lowerGC()
		rev, err := s.load(ctx, f, sink)
		if err != nil {
			restore()
			if ctx.Err() != nil {
				break
			}
			// A store not migrated yet is waited for quietly.
			if !errors.Is(err, ErrNoLayout) || time.Since(warned) >= 30*time.Second {
				s.Log.Warn("store load failed; retrying", "err", err, "in", backoff)
				if errors.Is(err, ErrNoLayout) {
					warned = time.Now()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		sink.Commit(rev, true)
		restore()
		if s.FreeAfterLoad {
			debug.FreeOSMemory()
		}
		err = s.watch(ctx, rev, f, sink)
		if ctx.Err() != nil {
			break
		}
		s.Log.Warn("watch ended; reloading the whole state", "err", err)
	}
	return ctx.Err()
}

// loadGC is the lowering of the GC percent that the full loads running
// in this process share (LoadGCPercent).
var loadGC struct {
	sync.Mutex
	loads int // running
	prev  int // the percent before the first of them
}

// lowerGC sets the GC percent to s.LoadGCPercent for a full load and
// returns what puts it back (see LoadGCPercent).
func (s *Store) lowerGC() (restore func()) {
	if s.LoadGCPercent <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	loadGC.Lock()
	defer loadGC.Unlock()
	if loadGC.loads == 0 {
		loadGC.prev = debug.SetGCPercent(s.LoadGCPercent)
	}
	loadGC.loads++
	return func() {
		loadGC.Lock()
		defer loadGC.Unlock()
		if loadGC.loads--; loadGC.loads == 0 {
			debug.SetGCPercent(loadGC.prev)
		}
	}
}

// jitter waits a random duration in [0, LoadJitter), so that the nodes a
// region-wide restart (or a store outage) sets loading at once spread
// their full loads. It returns whether ctx is still live.
func (s *Store) jitter(ctx context.Context) bool {
	if s.LoadJitter > 0 && ctx.Err() == nil {
		t := time.NewTimer(s.draw(s.LoadJitter))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err() == nil
}

// draw picks a wait in [0, n).
func (s *Store) draw(n time.Duration) time.Duration {
	if s.drawJitter != nil {
		return s.drawJitter(n)
	}
	return rand.N(n)
}

// watch applies every change of f's watched spans after rev to sink
// until a watch fails (compaction included) or ctx ends. The watches
// share the client's stream and their responses are merged here, so sink
// is called from this goroutine only, a Commit after each response. A
// key's changes come in order (it lies in one span); a transaction that
// wrote keys of two spans reaches sink in two commits of its revision.
func (s *Store) watch(ctx context.Context, rev int64, f feed, sink Sink) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type response struct {
		clientv3.WatchResponse
		i      int // the span: len(f.watch) is the commit marker
		closed bool
	}
	merged := make(chan response)
	n := len(f.watch)
	if f.marker {
		n++
	}
	for i := range n {
		var wc clientv3.WatchChan
		if i < len(f.watch) {
			wc = s.Client.Watch(wctx, f.watch[i].prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		} else {
			wc = s.Client.Watch(wctx, CommitKey, clientv3.WithRev(rev+1))
		}
		wg.Go(func() {
			for resp := range wc {
				select {
				case merged <- response{WatchResponse: resp, i: i}:
				case <-wctx.Done():
					return
				}
			}
			select {
			case merged <- response{i: i, closed: true}:
			case <-wctx.Done():
			}
		})
	}
	name := func(i int) string {
		if i < len(f.watch) {
			return f.watch[i].prefix
		}
		return CommitKey
	}
	p := newProgress(len(f.watch))
	committed := rev
	// A commit whose changes are still on their way is waited for at most
	// markerWait: tick so that its wait ends without another response.
	tick := time.NewTicker(markerWait / 2)
	defer tick.Stop()
	// With markers, a change waits (held) until its whole transaction
	// arrived: see heldChanges.
	var held heldChanges
	release := time.NewTimer(time.Hour)
	release.Stop()
	defer release.Stop()
	// flush passes the held changes that may go on to sink and commits;
	// it arms release for the next one's wait.
	flush := func(changed bool) {
		next := p.applied()
		if held.flush(sink, next, time.Now()) {
			changed = true
		}
		if at, ok := held.due(); ok {
			release.Reset(time.Until(at))
		}
		if changed || next > committed {
			committed = max(committed, next)
			sink.Commit(committed, false)
		}
	}
	for {
		var resp response
		select {
		case resp = <-merged:
		case <-tick.C:
			if f.marker {
				flush(false)
			}
			continue
		case <-release.C:
			flush(false)
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if resp.closed {
			return fmt.Errorf("watch of %s closed", name(resp.i))
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("history compacted at %d", resp.CompactRevision)
			}
			return err
		}
		if resp.IsProgressNotify() || len(resp.Events) == 0 {
			continue
		}
		changed := false
		for _, e := range resp.Events {
			if resp.i == len(f.watch) {
				spans, ok := touches(e.Kv.Value, f.watch)
				p.commit(e.Kv.ModRevision, spans, !ok)
				continue
			}
			p.change(resp.i, e.Kv.ModRevision)
			kind, key, ok := f.watch[resp.i].parse(string(e.Kv.Key))
			if !ok {
				continue
			}
			if f.marker {
				held.add(kind, key, e, time.Now())
				continue
			}
			if e.Type == clientv3.EventTypeDelete {
				sink.Delete(kind, key, e.Kv.ModRevision)
			} else {
				sink.Put(kind, key, e.Kv.Value, e.Kv.ModRevision)
			}
			changed = true
			// The header's revision may already count changes later
			// responses carry: the state reflects the last event's.
			rev = max(rev, e.Kv.ModRevision)
		}
		if f.marker {
			// Only what every span delivered whole: a change of one span
			// may come before another span's change of the same or an
			// earlier commit (their watches are merged here), so the
			// revision committed is the markers' (progress), and a change
			// goes to the sink once every change of its commit arrived.
			flush(false)
			continue
		}
		if changed || rev > committed {
			committed = max(committed, rev)
			sink.Commit(committed, false)
		}
	}
}

// heldWait bounds how long a change waits for the rest of its
// transaction (heldChanges): a change no marker announces (written
// straight into etcd) or one behind a marker whose change never comes
// goes on after it, under the revision applied then.
const heldWait = time.Second

// heldChanges are a scope follower's changes that wait for the rest of
// their transaction. The spans (the scope's copies, each kind read whole)
// are watched apart, so a transaction that wrote keys of two spans (a
// Quarantine, and the quarantined EIP's copy into the quarantine set's
// scope) arrives in two responses, either first. Passed on at once, the
// sink would commit the Quarantine without the copy: the quarantine set's
// edge would announce the address's /32 before it holds the EIP (and the
// agents would send it the EIP's replies). A change goes on once the
// markers say its revision arrived whole (progress.applied), or after
// heldWait; in revision order, so a key's changes keep theirs.
type heldChanges struct {
	q []heldChange // by revision, then arrival
}

type heldChange struct {
	kind, key string
	value     []byte
	del       bool
	rev       int64
	at        time.Time
}

func (h *heldChanges) add(kind, key string, e *clientv3.Event, now time.Time) {
	c := heldChange{kind: kind, key: key, value: e.Kv.Value, del: e.Type == clientv3.EventTypeDelete, rev: e.Kv.ModRevision, at: now}
	i := len(h.q)
	for i > 0 && h.q[i-1].rev > c.rev {
		i--
	}
	h.q = slices.Insert(h.q, i, c)
}

// flush passes on, in order, the changes of revisions up to applied and
// those that waited heldWait, and reports whether it passed any.
func (h *heldChanges) flush(sink Sink, applied int64, now time.Time) bool {
	n := 0
	for n < len(h.q) && (h.q[n].rev <= applied || now.Sub(h.q[n].at) >= heldWait) {
		c := h.q[n]
		if c.del {
			sink.Delete(c.kind, c.key, c.rev)
		} else {
			sink.Put(c.kind, c.key, c.value, c.rev)
		}
		n++
	}
	h.q = slices.Delete(h.q, 0, n)
	return n > 0
}

// due is when the first held change's wait ends (those after it go with
// it at the latest).
func (h *heldChanges) due() (time.Time, bool) {
	if len(h.q) == 0 {
		return time.Time{}, false
	}
	return h.q[0].at.Add(heldWait), true
}

// stateSink keeps a model.State and hands it to a Handler.
type stateSink struct {
	st      *model.State
	log     *slog.Logger
	invalid *Invalid
	h       Handler
	evs     []Event
	loading bool // a full load: no events, the handler resyncs
	// revs, for FollowRevisions: every object's mod revision (nil: not
	// kept, Follow's readers do without).
	revs Revisions
	hr   RevHandler
}

func (ss *stateSink) Reset() {
	ss.st, ss.evs, ss.loading = model.NewState(), nil, true
	if ss.revs != nil {
		ss.revs = Revisions{}
	}
	ss.invalid.Reset()
}

func (ss *stateSink) Put(kind, key string, value []byte, rev int64) {
	o, err := model.DecodeStored(kind, key, value)
	if err != nil {
		// Refused: it counts as absent (see Invalid).
		ss.invalid.Refuse(kind, key, err)
		ss.remove(kind, key, rev)
		return
	}
	ss.invalid.Clear(kind, key)
	ss.st.Set(o)
	if ss.revs != nil {
		ss.revs.Set(kind, key, rev)
	}
	if !ss.loading {
		ss.evs = append(ss.evs, Event{Kind: kind, Key: key, Obj: o, Rev: rev})
	}
}

func (ss *stateSink) Delete(kind, key string, rev int64) {
	ss.invalid.Clear(kind, key)
	ss.remove(kind, key, rev)
}

func (ss *stateSink) remove(kind, key string, rev int64) {
	ss.st.Remove(kind, key)
	if ss.revs != nil {
		ss.revs.Delete(kind, key)
	}
	if !ss.loading {
		ss.evs = append(ss.evs, Event{Kind: kind, Key: key, Rev: rev})
	}
}

func (ss *stateSink) Commit(rev int64, resync bool) {
	evs := ss.evs
	ss.evs, ss.loading = nil, false
	if resync {
		evs = nil
	}
	if ss.h != nil {
		ss.h(ss.st, rev, evs, resync)
	}
	if ss.hr != nil {
		ss.hr(ss.st, ss.revs, rev, evs, resync)
	}
}

// Event is one change seen on the watch stream.
type Event struct {
	Kind, Key string
	Obj       model.Object // nil: deleted
	// Rev is the revision of the change. A watch response that catches up
	// on history can carry events of several revisions under a header
	// revision past all of them, so a reader that skips changes it already
	// has must compare this, not the handler's rev.
	Rev int64
}

// Handler receives the state after every change. On resync (first load,
// or after the watch lost history) events is nil and the whole state must
// be reconciled. It runs on Follow's goroutine and must not keep st.
type Handler func(st *model.State, rev int64, events []Event, resync bool)

// Follow loads the state, hands it to h, then applies every watched change
// and hands it over again, until ctx ends. A compacted or broken watch
// leads to a full reload (resync).
//
// Objects that fail validation are left out of st (see Invalid); Invalid
// lists them.
func (s *Store) Follow(ctx context.Context, h Handler) error {
	return s.FollowSink(ctx, &stateSink{st: model.NewState(), log: s.Log, h: h, invalid: s.invalidSet()})
}

// RevHandler is a Handler that also receives every object's mod revision
// (see FollowRevisions); like st, it must not keep revs.
type RevHandler func(st *model.State, revs Revisions, rev int64, events []Event, resync bool)

// FollowRevisions is Follow keeping every object's mod revision as well
// (the controller serves them as ETags; other readers save the memory).
func (s *Store) FollowRevisions(ctx context.Context, h RevHandler) error {
	return s.FollowSink(ctx, &stateSink{st: model.NewState(), log: s.Log, hr: h, invalid: s.invalidSet(), revs: Revisions{}})
}

// Invalid lists the objects Follow refused (at most MaxInvalidShown) and
// how many there are.
func (s *Store) Invalid() ([]model.InvalidObject, int) { return s.invalidSet().List() }

func (s *Store) invalidSet() *Invalid {
	s.invalidOnce.Do(func() { s.invalid = &Invalid{Log: s.Log} })
	return s.invalid
}
