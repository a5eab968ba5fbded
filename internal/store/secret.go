package store

import (
	"context"
	"crypto/rand"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// SecretRoot holds the region's shared secrets (outside Root: no API
// object, never listed by the controller's API). Whoever can read the
// store can read them: the store is already the region's root of trust
// (docs/controller.md, "Who can reach the store").
const SecretRoot = "/azgate/secrets/"

// Secrets is what a role needs to share a secret with the other nodes of
// the region (the edges' connection sync authenticates its peers with one).
type Secrets interface {
	// Secret returns the region's secret name, creating it (size random
	// bytes) if it does not exist yet: every node that asks gets the same
	// bytes, whichever asked first.
	Secret(ctx context.Context, name string, size int) ([]byte, error)
}

var _ Secrets = (*Store)(nil)

// Secret implements Secrets with one transaction: create the key only if
// it has never been created (create revision 0), else read it. Two nodes
// racing both end up with the winner's bytes.
func (s *Store) Secret(ctx context.Context, name string, size int) ([]byte, error) {
	if name == "" || size < 16 || size > 4096 {
		return nil, fmt.Errorf("secret %q: name must be set and size within 16..4096 bytes (got %d)", name, size)
	}
	key := SecretRoot + name
	fresh := make([]byte, size)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	resp, err := s.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(fresh))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, mapErr(err))
	}
	if resp.Succeeded {
		return fresh, nil
	}
	rr := resp.Responses[0].GetResponseRange()
	if rr == nil || len(rr.Kvs) != 1 {
		return nil, fmt.Errorf("secret %s: the store holds no value for it", name)
	}
	v := rr.Kvs[0].Value
	if len(v) != size {
		return nil, fmt.Errorf("secret %s: the store holds %d bytes, want %d (remove %s to make a new one)", name, len(v), size, key)
	}
	return v, nil
}
