package controller

import (
	"context"
	"net/netip"
	"testing"

	"github.com/azgate/azgate/internal/model"
)

// TestWritePanicRollsBack: a plan that panics (a bug) leaves the view as
// it was and unlocked, dry run or not: the panic goes on to the caller
// (net/http recovers it) and the controller keeps serving.
func TestWritePanicRollsBack(t *testing.T) {
	c := openCore(t)
	for _, dry := range []bool{false, true} {
		ctx := WithWriteOptions(context.Background(), WriteOptions{DryRun: dry})
		func() {
			defer func() {
				if recover() == nil {
					t.Error("the panic did not reach the caller")
				}
			}()
			c.writeW(ctx, func(tx *txn) error {
				if _, err := tx.put(&model.EIP{Address: netip.MustParseAddr("198.51.100.31")}); err != nil {
					t.Error(err)
				}
				panic("a bug in a plan")
			})
		}()
		v := c.view
		if !v.mu.TryLock() {
			t.Fatalf("dry run %v: the view is still locked after a panicking plan", dry)
		}
		v.mu.Unlock()
		if !v.applyMu.TryLock() {
			t.Fatalf("dry run %v: the view's applyMu is still locked after a panicking plan", dry)
		}
		v.applyMu.Unlock()
		if _, _, _, err := c.Get(model.KindEIP, "198.51.100.31"); err == nil {
			t.Errorf("dry run %v: the panicking plan's EIP stayed in the view", dry)
		}
	}
}
