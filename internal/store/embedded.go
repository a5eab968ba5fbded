package store

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Embedded is a single-node etcd running inside the controller: the
// default store, so one binary is a whole working system.
type Embedded struct {
	etcd *embed.Etcd
	// ClientURLs are where clients reach it.
	ClientURLs []string
	closing    *atomic.Bool // silences etcd's logs while it shuts down
}

// EmbeddedTxnOps is the transaction size the embedded server accepts.
const EmbeddedTxnOps = 4096

// StartEmbedded starts etcd with its data in dir, serving clients on
// clientURLs (http://127.0.0.1:PORT or unix:///path). Peers talk over a
// unix socket in dir, so no TCP port is taken for them.
func StartEmbedded(dir string, clientURLs []string) (*Embedded, error) {
	return StartEmbeddedWithLog(dir, clientURLs, slog.Default())
}

// StartEmbeddedWithLog is StartEmbedded with etcd's errors going to log.
func StartEmbeddedWithLog(dir string, clientURLs []string, log *slog.Logger) (*Embedded, error) {
	if len(clientURLs) == 0 {
		return nil, fmt.Errorf("embedded etcd: no client URL")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "azgate"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.LogLevel = "error"
	cfg.Logger = "zap"
	closing := new(atomic.Bool)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(log, closing))
	var curls []url.URL
	for _, s := range clientURLs {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: client URL %q: %w", s, err)
		}
		if u.Scheme == "unix" {
			os.MkdirAll(filepath.Dir(u.Path), 0o755)
			os.Remove(u.Path) // a stale socket from a crash
		}
		curls = append(curls, *u)
	}
	cfg.ListenClientUrls = curls
	cfg.AdvertiseClientUrls = curls
	peer := filepath.Join(dir, "etcd-peer.sock")
	os.Remove(peer)
	pu, _ := url.Parse("unix://" + peer)
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.MaxTxnOps = EmbeddedTxnOps
	cfg.MaxRequestBytes = 32 << 20
	cfg.QuotaBackendBytes = 8 << 30
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after 60s")
	}
	return &Embedded{etcd: e, ClientURLs: slices.Clone(clientURLs), closing: closing}, nil
}

// Close stops the server.
func (e *Embedded) Close() {
	e.closing.Store(true)
	e.etcd.Close()
	for _, s := range e.ClientURLs {
		if p, ok := strings.CutPrefix(s, "unix://"); ok {
			os.Remove(p)
		}
	}
}

// Err reports a fatal server error.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }
