// Package embeddedtest gives the roles' tests a real store: an embedded
// etcd in a temporary directory, reached through its unix socket. (It is
// not in storetest, which the store's own tests import.)
package embeddedtest

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/etcdembed"
)

// Store starts an embedded etcd for the test and connects to it; both go
// when the test ends.
func Store(t testing.TB) *store.Store {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "aze") // short: the unix socket path is limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e, err := etcdembed.StartWithLog(dir, []string{"unix://" + filepath.Join(dir, "etcd.sock")}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s, err := store.Connect(store.Options{Endpoints: e.ClientURLs, TxnOps: etcdembed.TxnOps, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
