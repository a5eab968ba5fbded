//go:build !node

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/azgate/azgate/internal/controller"
	"github.com/azgate/azgate/internal/store"
	"github.com/azgate/azgate/internal/store/storetest"
)

// TestEtcdTLSFlags: the controller and the edge reach an external etcd
// that demands client certificates only with --etcd-cacert, --etcd-cert
// and --etcd-key; without them each refuses to start with an error that
// names the missing flags.
func TestEtcdTLSFlags(t *testing.T) {
	p := storetest.NewPKI(t, t.TempDir())
	url := storetest.StartEtcd(t, "https", "--cert-file", p.ServerCert, "--key-file", p.ServerKey,
		"--client-cert-auth", "--trusted-ca-file", p.CA)
	run := func(timeout time.Duration, args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(args)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}

	_, err := run(time.Minute, "controller", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--log-level", "error",
		"--etcd-endpoints", url, "--etcd-cacert", p.CA)
	if err == nil || !strings.Contains(err.Error(), "--etcd-cert and --etcd-key") {
		t.Fatalf("controller without a client certificate: %v", err)
	}
	_, err = run(time.Minute, "edge", "--name", "e1", "--attach", "eth0", "--log-level", "error", "--etcd-endpoints", url)
	if err == nil || !strings.Contains(err.Error(), "--etcd-cacert") {
		t.Fatalf("edge without TLS settings: %v", err)
	}
	_, err = run(time.Minute, "controller", "--data-dir", t.TempDir(), "--etcd-cacert", p.CA)
	if err == nil || !strings.Contains(err.Error(), "external etcd") {
		t.Fatalf("TLS settings with the embedded etcd: %v", err)
	}
	// With the certificate the controller starts and serves (the flags
	// fill these fields).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := controller.Start(ctx, controller.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		EtcdEndpoints: []string{url}, EtcdAuth: store.ClientAuth{CACert: p.CA, Cert: p.ClientCert, Key: p.ClientKey}})
	if err != nil {
		t.Fatalf("controller with a client certificate: %v", err)
	}
	defer s.Close()
	out, err := azgate(t, s, "", "az", "create", "az1", "--region", "r1")
	if err != nil {
		t.Fatalf("az create through a controller on TLS etcd: %v\n%s", err, out)
	}
}
