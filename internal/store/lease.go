package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
)

// The roles reach the store only through this package (issue 7,
// section 6): leases, leased writes, status reads and prefix watches are
// methods of Store, and the roles take the small interfaces below so a
// test can hand them another implementation.

// LeaseID names a lease: the keys written with it vanish when it expires
// or is revoked.
type LeaseID int64

// ErrLeaseNotFound means the lease expired or was revoked.
var ErrLeaseNotFound = errors.New("store: lease not found")

// ErrCompacted means a watch asked for history the store no longer has:
// read everything again.
var ErrCompacted = errors.New("store: history compacted")

// KV is one key and value; in a leased write a nil Value deletes the key.
type KV struct {
	Key   string
	Value []byte
}

// Change is one watched change of a key under a prefix.
type Change struct {
	Key    string
	Value  []byte // nil: deleted
	Delete bool
}

// Leases is what a role needs to publish data that must vanish with it
// (node status, health reports).
type Leases interface {
	// Grant takes a lease of ttl (rounded down to whole seconds, at least 1).
	Grant(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// KeepAlive keeps id alive until ctx ends; lost is closed when that
	// stops (expiry, revocation, ctx).
	KeepAlive(ctx context.Context, id LeaseID) (lost <-chan struct{}, err error)
	// KeepAliveOnce renews id once.
	KeepAliveOnce(ctx context.Context, id LeaseID) error
	// Revoke ends id: every key written with it is deleted.
	Revoke(ctx context.Context, id LeaseID) error
	// WriteLeased puts (Value non-nil) with the lease, or deletes, every
	// key in one transaction. ErrLeaseNotFound: the lease is gone.
	WriteLeased(ctx context.Context, id LeaseID, kvs []KV) error
}

// Follower streams the desired state (see FollowSink and Follow).
type Follower interface {
	FollowSink(ctx context.Context, sink Sink) error
	Follow(ctx context.Context, h Handler) error
	// Invalid lists the objects Follow refused as invalid.
	Invalid() ([]model.InvalidObject, int)
}

// Node is what an edge or an agent needs of the store: the desired
// state (whole, or its scope's share: scope.go), leases, and keys outside it (an agent reads the edges' announce
// keys, announce.go).
type Node interface {
	Follower
	ScopeFollower
	Leases
	PrefixReader
}

var _ Node = (*Store)(nil)

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %v", ErrLeaseNotFound, err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %v", ErrCompacted, err)
	}
	return err
}

// Grant takes a lease.
func (s *Store) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	g, err := s.Client.Grant(ctx, max(int64(ttl/time.Second), 1))
	if err != nil {
		return 0, mapErr(err)
	}
	return LeaseID(g.ID), nil
}

// KeepAlive keeps a lease alive until ctx ends or the lease is lost.
func (s *Store) KeepAlive(ctx context.Context, id LeaseID) (<-chan struct{}, error) {
	ka, err := s.Client.KeepAlive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return nil, mapErr(err)
	}
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		for range ka { // closed on expiry, revocation, or when ctx ends
		}
	}()
	return lost, nil
}

// KeepAliveOnce renews a lease once.
func (s *Store) KeepAliveOnce(ctx context.Context, id LeaseID) error {
	_, err := s.Client.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	return mapErr(err)
}

// Revoke ends a lease and deletes its keys.
func (s *Store) Revoke(ctx context.Context, id LeaseID) error {
	_, err := s.Client.Revoke(ctx, clientv3.LeaseID(id))
	return mapErr(err)
}

// WriteLeased writes kvs with the lease in one transaction.
func (s *Store) WriteLeased(ctx context.Context, id LeaseID, kvs []KV) error {
	ops := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		if kv.Value == nil {
			ops[i] = clientv3.OpDelete(kv.Key)
		} else {
			ops[i] = clientv3.OpPut(kv.Key, string(kv.Value), clientv3.WithLease(clientv3.LeaseID(id)))
		}
	}
	_, err := s.Client.Txn(ctx).Then(ops...).Commit()
	return mapErr(err)
}

// GetPrefix reads every key under prefix at one revision.
func (s *Store) GetPrefix(ctx context.Context, prefix string) ([]KV, int64, error) {
	resp, err := s.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, mapErr(err)
	}
	out := make([]KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = KV{Key: string(kv.Key), Value: kv.Value}
	}
	return out, resp.Header.Revision, nil
}

// WatchPrefix hands every change under prefix after revision from to h,
// one watch response at a time, until ctx ends or the watch breaks (the
// error says why; ErrCompacted: the history from `from` is gone).
func (s *Store) WatchPrefix(ctx context.Context, prefix string, from int64, h func([]Change)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("%w at %d", ErrCompacted, resp.CompactRevision)
			}
			return err
		}
		if len(resp.Events) == 0 {
			continue
		}
		cs := make([]Change, len(resp.Events))
		for i, e := range resp.Events {
			cs[i] = Change{Key: string(e.Kv.Key), Value: e.Kv.Value, Delete: e.Type == clientv3.EventTypeDelete}
		}
		h(cs)
	}
	return errors.New("watch channel closed")
}

// PrefixReader reads and watches keys outside the desired state (health
// reports, node statuses).
type PrefixReader interface {
	GetPrefix(ctx context.Context, prefix string) ([]KV, int64, error)
	WatchPrefix(ctx context.Context, prefix string, from int64, h func([]Change)) error
}

var _ PrefixReader = (*Store)(nil)

// StatusKey is where a node publishes its status.
func StatusKey(role, name string) string { return StatusRoot + role + "/" + name }

// PublishStatus writes get's status at StatusKey(role, name) with a
// lease, every interval, until ctx ends; then it revokes the lease, so a
// node that stops leaves no status behind, and one that vanishes leaves
// it for at most 3 intervals (5 s at least).
//
// Each call to the store has a timeout of one interval (1 s at least): on
// an etcd cluster a write caught by the loss of the leader waits for
// etcd's request timeout (about 7 s, past the lease), where a new try
// goes to a member that has a leader again (issue 8, part 7). Only a lease
// the store says is gone is replaced.
func PublishStatus(ctx context.Context, s Leases, role, name string, every time.Duration, get func() model.NodeStatus, log *slog.Logger) {
	key := StatusKey(role, name)
	ttl := max(3*every, 5*time.Second)
	callTimeout := max(every, time.Second)
	var lease LeaseID
	t := time.NewTicker(every)
	defer t.Stop()
	publish := func() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		b, _ := json.Marshal(get())
		if lease == 0 {
			l, err := s.Grant(cctx, ttl)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("status lease grant failed", "err", err)
				}
				return
			}
			lease = l
		}
		err := s.WriteLeased(cctx, lease, []KV{{Key: key, Value: b}})
		if err == nil {
			err = s.KeepAliveOnce(cctx, lease)
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("status publish failed", "err", err)
			}
			if errors.Is(err, ErrLeaseNotFound) {
				lease = 0
			}
		}
	}
	for {
		publish()
		select {
		case <-ctx.Done():
			if lease != 0 {
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				s.Revoke(rctx, lease)
				cancel()
			}
			return
		case <-t.C:
		}
	}
}

// NodeEntry is one published node status, or why it could not be read.
type NodeEntry struct {
	Key    string
	Role   string
	Name   string
	Status model.NodeStatus
	Err    error // the key or value is malformed
}

// NodeStatuses reads the statuses published under StatusKey(role, ...);
// role "" reads every role's. Role and Name of a status that leaves them
// empty are filled from its key.
func NodeStatuses(ctx context.Context, s PrefixReader, role string) ([]NodeEntry, error) {
	prefix := StatusRoot
	if role != "" {
		prefix += role + "/"
	}
	kvs, _, err := s.GetPrefix(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("store: reading node statuses: %w", err)
	}
	out := make([]NodeEntry, 0, len(kvs))
	for _, kv := range kvs {
		e := NodeEntry{Key: kv.Key}
		r, n, ok := strings.Cut(strings.TrimPrefix(kv.Key, StatusRoot), "/")
		if !ok || r == "" || n == "" {
			e.Err = fmt.Errorf("%s: not a ROLE/NAME status key", kv.Key)
			out = append(out, e)
			continue
		}
		e.Role, e.Name = r, n
		if err := json.Unmarshal(kv.Value, &e.Status); err != nil {
			e.Err = fmt.Errorf("%s: %w", kv.Key, err)
			out = append(out, e)
			continue
		}
		if e.Status.Role == "" {
			e.Status.Role = r
		}
		if e.Status.Name == "" {
			e.Status.Name = n
		}
		out = append(out, e)
	}
	return out, nil
}
