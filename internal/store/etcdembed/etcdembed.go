// Package etcdembed runs the controller's embedded single-node etcd. It
// is apart from internal/store so that what only follows the store (the
// edge and agent roles, internal/store's importers) does not link etcd's
// server, its raft and its package initialisers (TestNoEtcdServer in
// internal/store).
package etcdembed

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

// Server is a single-node etcd running inside the controller: the
// default store, so one binary is a whole working system.
type Server struct {
	etcd *embed.Etcd
	// ClientURLs are where clients reach it.
	ClientURLs []string
	closing    *atomic.Bool // silences etcd's logs while it shuts down
}

// TxnOps is the transaction size the embedded server accepts.
const TxnOps = 4096

// Start starts etcd with its data in dir, serving clients on
// clientURLs (unix:///path only: the embedded etcd has no authentication,
// and a TCP port, even on loopback, would be open to every local user). dir is
// made mode 0700, which is what keeps other local users from the sockets
// inside it: the client socket belongs there, and the peer listener (a
// single node has no peers, but etcd insists on one) is a filesystem
// socket there too, so no TCP port and no abstract socket is opened.
func Start(dir string, clientURLs []string) (*Server, error) {
	return StartWithLog(dir, clientURLs, slog.Default())
}

// StartWithLog is Start with etcd's errors going to log.
func StartWithLog(dir string, clientURLs []string, log *slog.Logger) (*Server, error) {
	if len(clientURLs) == 0 {
		return nil, fmt.Errorf("embedded etcd: no client URL")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	// The sockets inside are guarded only by the directory's mode: enforce
	// it even when the directory already existed with a wider one.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: data dir %s: %w", dir, err)
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
		switch u.Scheme {
		case "unix":
			if u.Host != "" || u.Path == "" {
				return nil, fmt.Errorf("embedded etcd: client URL %q: want unix:///absolute/path", s)
			}
			if !strings.HasPrefix(u.Path, dir+"/") {
				log.Warn("embedded etcd client socket outside the data dir: whoever can reach the path can read and write the store without credentials", "url", s, "data_dir", dir)
			}
			os.MkdirAll(filepath.Dir(u.Path), 0o755)
			os.Remove(u.Path) // a stale socket from a crash
		case "http", "https":
			// Even on loopback, every local user could read and write
			// the store through a TCP port of an etcd without
			// authentication: only sockets, guarded by file modes.
			return nil, fmt.Errorf("embedded etcd: client URL %q: the embedded etcd has no authentication, so it listens on unix sockets only (every local user could use a TCP port); roles on other machines use an external etcd with TLS and authentication", s)
		default:
			return nil, fmt.Errorf("embedded etcd: client URL %q: want unix:///path", s)
		}
		curls = append(curls, *u)
	}
	cfg.ListenClientUrls = curls
	cfg.AdvertiseClientUrls = curls
	// A single node has no peers, but etcd needs a peer URL to name the
	// member. etcd listens on a peer URL's host alone: unix:///path has an
	// empty host, which the kernel turns into an autobound abstract socket
	// that every local user can reach (issue 7: forged raft messages were
	// committed through it). So the listener's URL carries the path as its
	// host, a filesystem socket inside the 0700 data dir; the advertised
	// URL is the ordinary form of the same path.
	peer := filepath.Join(dir, "etcd-peer.sock")
	os.Remove(peer)
	cfg.ListenPeerUrls = []url.URL{{Scheme: "unix", Host: peer}}
	cfg.AdvertisePeerUrls = []url.URL{{Scheme: "unix", Path: peer}}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.MaxTxnOps = TxnOps
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
	return &Server{etcd: e, ClientURLs: slices.Clone(clientURLs), closing: closing}, nil
}

// Close stops the server.
func (e *Server) Close() {
	e.closing.Store(true)
	e.etcd.Close()
	for _, s := range e.ClientURLs {
		if p, ok := strings.CutPrefix(s, "unix://"); ok {
			os.Remove(p)
		}
	}
}

// Err reports a fatal server error.
func (e *Server) Err() <-chan error { return e.etcd.Err() }
