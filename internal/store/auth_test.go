package store

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store/storetest"
)

// useStore checks that s reads and writes: a commit, a load, a leased
// write (status publishing) and a status read.
func useStore(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping with credentials: %v", err)
	}
	b, _ := Encode(&model.AZ{Name: "az1"})
	if _, err := s.Commit(ctx, 1<<40, []Op{{Kind: model.KindAZ, Key: "az1", Value: b}}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	st, _, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if _, ok := st.Get(model.KindAZ, "az1"); !ok {
		t.Fatal("the AZ written is not loaded")
	}
	l, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if err := s.WriteLeased(ctx, l, []KV{{Key: StatusKey("edge", "e1"), Value: []byte(`{"name":"e1"}`)}}); err != nil {
		t.Fatalf("leased write: %v", err)
	}
	ns, err := NodeStatuses(ctx, s, "edge")
	if err != nil || len(ns) != 1 || ns[0].Status.Name != "e1" {
		t.Fatalf("node statuses: %v %+v", err, ns)
	}
}

// connectErr connects with o and pings: the error of whichever fails.
func connectErr(o Options) error {
	o.Log = quiet
	s, err := Connect(o)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return s.Ping(ctx)
}

// TestExternalTLS runs a real etcd that requires TLS client certificates
// (--client-cert-auth): without a certificate, or trusting the wrong CA,
// the store refuses with an error that says what to give; with them it
// works.
func TestExternalTLS(t *testing.T) {
	p := storetest.NewPKI(t, t.TempDir())
	url := storetest.StartEtcd(t, "https", "--cert-file", p.ServerCert, "--key-file", p.ServerKey,
		"--client-cert-auth", "--trusted-ca-file", p.CA)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no TLS settings", Options{Endpoints: []string{url}}, "TLS with etcd failed"},
		{"no client certificate", Options{Endpoints: []string{url}, Auth: ClientAuth{CACert: p.CA}}, "requires a client certificate"},
		{"wrong CA", Options{Endpoints: []string{url}, Auth: ClientAuth{CACert: p.OtherCA, Cert: p.ClientCert, Key: p.ClientKey}}, "check --etcd-cacert"},
		{"plaintext endpoint with TLS settings", Options{Endpoints: []string{strings.Replace(url, "https", "http", 1)}, Auth: ClientAuth{CACert: p.CA}}, "use https://"},
		{"cert without key", Options{Endpoints: []string{url}, Auth: ClientAuth{CACert: p.CA, Cert: p.ClientCert}}, "both --etcd-cert and --etcd-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connectErr(tc.o)
			if err == nil {
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
			t.Log(err)
		})
	}
	s, err := Connect(Options{Endpoints: []string{url}, Log: quiet, Auth: ClientAuth{CACert: p.CA, Cert: p.ClientCert, Key: p.ClientKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	useStore(t, s)
}

// TestExternalUserPassword runs a real etcd with authentication enabled
// and a user limited to azgate's keys: without credentials, or with a
// wrong password, the store refuses with a clear error; with them it
// works.
func TestExternalUserPassword(t *testing.T) {
	url := storetest.StartEtcd(t, "http")
	dir := t.TempDir()
	// Enable auth as etcd's administrator would (etcdctl user add, role
	// add, role grant-permission --prefix, auth enable).
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "azgate"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "azgate", "/azgate/", clientv3.GetPrefixRangeEnd("/azgate/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "azgate", "s3cret pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "azgate", "azgate"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	}
	for _, f := range steps {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			err := f()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("setting up etcd auth: %v", err)
			}
		}
	}
	admin.Close()
	pw := filepath.Join(dir, "password")
	if err := os.WriteFile(pw, []byte("s3cret pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(wrong, []byte("guess\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		a    ClientAuth
		want string
	}{
		{"no credentials", ClientAuth{}, "etcd requires authentication"},
		{"wrong password", ClientAuth{User: "azgate", PasswordFile: wrong}, `etcd refused user "azgate"`},
		{"user without password file", ClientAuth{User: "azgate"}, "needs a password file"},
		{"missing password file", ClientAuth{User: "azgate", PasswordFile: filepath.Join(dir, "nope")}, "--etcd-password-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := connectErr(Options{Endpoints: []string{url}, Auth: tc.a})
			if err == nil {
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
			t.Log(err)
		})
	}
	s, err := Connect(Options{Endpoints: []string{url}, Log: quiet, Auth: ClientAuth{User: "azgate", PasswordFile: pw}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	useStore(t, s)
}

// TestPlaintextWarning: a plaintext endpoint off the machine is logged;
// loopback and unix ones are not.
func TestPlaintextWarning(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		warn     bool
	}{
		{"http://192.0.2.10:2379", true},
		{"192.0.2.10:2379", true},
		{"http://etcd.example:2379", true},
		{"https://192.0.2.10:2379", false},
		{"http://127.0.0.1:2379", false},
		{"localhost:2379", false},
		{"http://[::1]:2379", false},
		{"unix:///var/lib/azgate/etcd.sock", false},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		if err := checkEndpoints([]string{tc.endpoint}, ClientAuth{}, log); err != nil {
			t.Errorf("%s: %v", tc.endpoint, err)
		}
		if got := strings.Contains(buf.String(), "plaintext etcd endpoint"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %s", tc.endpoint, got, tc.warn, buf.String())
		}
	}
}

// TestPasswordFileMode: a password file that group or others may read or
// write is refused with a message naming it and its mode; 0600 and 0400
// are read.
func TestPasswordFileMode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o604, false}, {0o620, false}, {0o666, false}} {
		p := filepath.Join(dir, fmt.Sprintf("pw-%o", c.mode))
		if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil {
			t.Fatal(err)
		}
		pw, err := ClientAuth{User: "azgate", PasswordFile: p}.password()
		switch {
		case c.ok && (err != nil || pw != "s3cret"):
			t.Errorf("mode %#o: %q, %v", c.mode, pw, err)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), fmt.Sprintf("mode %#o", c.mode))):
			t.Errorf("mode %#o: %v, want a refusal naming the file and its mode", c.mode, err)
		}
	}
	if _, err := (ClientAuth{User: "azgate", PasswordFile: dir}).password(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory as password file: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	if !isLoopback("127.0.0.2") || !isLoopback("::1") || !isLoopback("localhost") || isLoopback("198.51.100.1") {
		t.Error("isLoopback is wrong")
	}
}
