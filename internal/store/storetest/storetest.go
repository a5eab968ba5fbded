// Package storetest starts real etcd servers for tests: Debian's etcd
// (package etcd-server) on loopback, with TLS material made here, and
// clusters of several members on unix sockets (StartCluster).
package storetest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/store/etcdproc"
)

// PKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate signed by it, and another CA, as PEM files.

// NewPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, into dir.
type PKI struct{ CA, ServerCert, ServerKey, ClientCert, ClientKey, OtherCA string }

func NewPKI(t *testing.T, dir string) PKI {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(1)
	mkCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := key()
		serial++
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c, k, der
	}
	ca, caKey, caDER := mkCA("azgate test CA")
	_, _, otherDER := mkCA("another CA")
	leaf := func(name string, usage x509.ExtKeyUsage, ips []net.IP) (certPath, keyPath string) {
		k := key()
		serial++
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kd)
	}
	p := PKI{CA: write("ca.crt", "CERTIFICATE", caDER), OtherCA: write("other-ca.crt", "CERTIFICATE", otherDER)}
	p.ServerCert, p.ServerKey = leaf("server", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.ClientCert, p.ClientKey = leaf("azgate", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// StartEtcd runs Debian's etcd with extra flags and waits until its
// client port accepts connections; it returns the client URL.
func StartEtcd(t *testing.T, scheme string, extra ...string) string {
	t.Helper()
	url, _ := StartEtcdProcess(t, scheme, extra...)
	return url
}

// StartEtcdProcess is StartEtcd that also returns the server's process,
// for tests that stop or freeze it (SIGSTOP) to cut the store.
func StartEtcdProcess(t *testing.T, scheme string, extra ...string) (string, *os.Process) {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("no etcd binary: scripts/setup.sh installs it (apt-get install etcd-server)")
		}
		t.Skip("no etcd binary (apt-get install etcd-server) and not root: skipping the external etcd tests")
	}
	client := strings.Replace(freeURL(t), "http://", scheme+"://", 1)
	peer := freeURL(t)
	dir := t.TempDir()
	args := append([]string{"--name", "test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "test=" + peer, "--log-level", "error", "--logger", "zap"}, extra...)
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT) // a frozen process dies only once thawed
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := strings.TrimPrefix(client, scheme+"://")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd at %s did not listen in 20s:\n%s", client, log.String())
		}
	}
	return client, cmd.Process
}

// freeURL returns http://127.0.0.1:PORT with a port free right now.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// StartCluster runs a cluster of n real etcd members (etcdproc) on unix
// sockets in a 0700 directory of the test's; they are stopped by PID when
// the test ends. It waits only for the client sockets: connect and read
// to wait for a leader.
func StartCluster(t testing.TB, n int) *etcdproc.Cluster {
	t.Helper()
	if _, err := etcdproc.Binary(); err != nil {
		if os.Geteuid() == 0 {
			t.Fatal(err)
		}
		t.Skip("no etcd binary (apt-get install etcd-server) and not root: skipping the etcd cluster tests")
	}
	// Short: a unix socket path has at most 107 bytes, and t.TempDir's
	// names carry the test's.
	dir, err := os.MkdirTemp("", "azec")
	if err != nil {
		t.Fatal(err)
	}
	c, err := etcdproc.Start(etcdproc.Config{Dir: dir, Members: n, MaxTxnOps: 1024})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		os.RemoveAll(dir)
	})
	return c
}

// ListeningUnix returns the paths of the listening unix sockets with the
// given inodes, from /proc/net/unix; abstract ones start with "@".
func ListeningUnix(t *testing.T, inodes map[uint64]bool) []string {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header: Num RefCount Protocol Flags Type St Inode Path
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue // unnamed
		}
		ino, err := strconv.ParseUint(fs[6], 10, 64)
		if err != nil || !inodes[ino] || fs[3] != "00010000" { // __SO_ACCEPTCON: listening
			continue
		}
		out = append(out, fs[7])
	}
	return out
}
