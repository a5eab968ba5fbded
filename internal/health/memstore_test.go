package health

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// memLeases is an in-memory store.Leases: the publisher needs no etcd,
// which is what the store's small interfaces are for (issue 7, section 6).
type memLeases struct {
	mu     sync.Mutex
	next   store.LeaseID
	leases map[store.LeaseID]chan struct{} // closed when the lease ends
	kv     map[string]memValue
}

type memValue struct {
	value string
	lease store.LeaseID
}

func newMemLeases() *memLeases {
	return &memLeases{leases: map[store.LeaseID]chan struct{}{}, kv: map[string]memValue{}}
}

func (m *memLeases) Grant(_ context.Context, _ time.Duration) (store.LeaseID, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	m.leases[m.next] = make(chan struct{})
	return m.next, nil
}

func (m *memLeases) KeepAlive(ctx context.Context, id store.LeaseID) (<-chan struct{}, error) {
	m.mu.Lock()
	end, ok := m.leases[id]
	m.mu.Unlock()
	if !ok {
		return nil, store.ErrLeaseNotFound
	}
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		select {
		case <-ctx.Done():
		case <-end:
		}
	}()
	return lost, nil
}

func (m *memLeases) KeepAliveOnce(_ context.Context, id store.LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leases[id]; !ok {
		return store.ErrLeaseNotFound
	}
	return nil
}

// Revoke ends a lease and deletes its keys (expiry does the same).
func (m *memLeases) Revoke(_ context.Context, id store.LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	end, ok := m.leases[id]
	if !ok {
		return store.ErrLeaseNotFound
	}
	close(end)
	delete(m.leases, id)
	for k, v := range m.kv {
		if v.lease == id {
			delete(m.kv, k)
		}
	}
	return nil
}

func (m *memLeases) WriteLeased(_ context.Context, id store.LeaseID, kvs []store.KV) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leases[id]; !ok {
		return store.ErrLeaseNotFound
	}
	for _, kv := range kvs {
		if kv.Value == nil {
			delete(m.kv, kv.Key)
		} else {
			m.kv[kv.Key] = memValue{string(kv.Value), id}
		}
	}
	return nil
}

func (m *memLeases) snapshot() (map[string]memValue, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]memValue, len(m.kv))
	for k, v := range m.kv {
		out[k] = v
	}
	return out, len(m.leases)
}

// TestPublisherOnMemoryStore: the publisher runs on another store.Leases
// than etcd; a lease that expires is replaced and every report written
// again; closing revokes the lease and so deletes the reports.
func TestPublisherOnMemoryStore(t *testing.T) {
	m := newMemLeases()
	p := &StorePublisher{Ctx: context.Background(), Store: m, Edge: "e1", TTL: time.Second, Log: quiet}
	ctx := context.Background()
	for _, b := range []string{"a", "b"} {
		if err := p.Publish(ctx, Target{Service: "s", Pool: "p", Backend: b}, model.HealthReport{Up: b == "a"}); err != nil {
			t.Fatal(err)
		}
	}
	kv, _ := m.snapshot()
	if len(kv) != 2 {
		t.Fatalf("stored %v", kv)
	}
	first := kv[model.HealthReportKey("e1", "s", "p", "a")].lease
	m.Revoke(ctx, first) // as if it expired
	eventually(t, "both reports are on a new lease", func() bool {
		kv, _ := m.snapshot()
		a, b := kv[model.HealthReportKey("e1", "s", "p", "a")], kv[model.HealthReportKey("e1", "s", "p", "b")]
		return len(kv) == 2 && a.lease != first && a.lease != 0 && b.lease == a.lease
	})
	p.Close()
	if kv, leases := m.snapshot(); len(kv) != 0 || leases != 0 {
		t.Fatalf("after Close: %d reports, %d leases", len(kv), leases)
	}
}
