package store

import (
	"bytes"
	"context"
	"sync"
	"testing"
)

// TestSecret: concurrent first calls agree on one secret, later calls read
// it back, and bad arguments or a value of another size are refused.
func TestSecret(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	const n = 8
	got := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = s.Secret(ctx, "connsync", 32)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if len(got[i]) != 32 || !bytes.Equal(got[i], got[0]) {
			t.Fatalf("call %d got %x, call 0 got %x: want the same 32 bytes", i, got[i], got[0])
		}
	}
	again, err := s.Secret(ctx, "connsync", 32)
	if err != nil || !bytes.Equal(again, got[0]) {
		t.Fatalf("read back %x (%v), want %x", again, err, got[0])
	}
	if other, err := s.Secret(ctx, "other", 32); err != nil || bytes.Equal(other, got[0]) {
		t.Fatalf("another name: %x (%v): want a different secret", other, err)
	}
	if _, err := s.Secret(ctx, "connsync", 64); err == nil {
		t.Fatal("a secret read with another size was accepted")
	}
	if _, err := s.Secret(ctx, "", 32); err == nil {
		t.Fatal("an empty name was accepted")
	}
}
