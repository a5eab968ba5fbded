//go:build !node

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
)

// TestRoleResult: a role that failed exits non-zero even when a signal
// came meanwhile (issue 17.4: the error was dropped on SIGTERM and the
// process exited 0); a signal that merely ended it is a clean stop.
func TestRoleResult(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	live := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	failed := errors.New("attach nosuch0: no such device")
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"failed", live, failed, failed},
		{"failed, then a signal", stopped, failed, failed},
		{"stopped by a signal", stopped, context.Canceled, nil},
		{"stopped by a signal, wrapped", stopped, fmt.Errorf("follow: %w", context.Canceled), nil},
		{"returned nil", stopped, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := roleResult(c.ctx, quiet, "edge", c.err, "stopping"); got != c.want {
				t.Fatalf("roleResult(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}
