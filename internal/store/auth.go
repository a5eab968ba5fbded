package store

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"
)

// ClientAuth is how a client proves itself to etcd and checks the server:
// TLS (a CA to verify the server, and a client certificate for etcd's
// --client-cert-auth) and etcd's own user/password authentication. Every
// role takes the same flags (--etcd-cacert, --etcd-cert, --etcd-key,
// --etcd-user, --etcd-password-file); the password is read from a file,
// never given on the command line where `ps` shows it.
type ClientAuth struct {
	CACert string // PEM bundle that signs etcd's server certificate ("": the system's roots)
	Cert   string // PEM client certificate (with Key)
	Key    string // PEM key of Cert
	// User and the password in PasswordFile (first line) log in to
	// etcd's authentication (etcdctl auth enable).
	User         string
	PasswordFile string
}

// TLS tells whether any TLS setting is given.
func (a ClientAuth) TLS() bool { return a.CACert != "" || a.Cert != "" || a.Key != "" }

// tlsConfig builds the client's TLS configuration; nil without settings.
func (a ClientAuth) tlsConfig() (*tls.Config, error) {
	if !a.TLS() {
		return nil, nil
	}
	if (a.Cert == "") != (a.Key == "") {
		return nil, errors.New("etcd client certificate needs both --etcd-cert and --etcd-key")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.CACert != "" {
		pem, err := os.ReadFile(a.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd CA (--etcd-cacert): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd CA (--etcd-cacert) %s: no PEM certificate in it", a.CACert)
		}
		cfg.RootCAs = pool
	}
	if a.Cert != "" {
		c, err := tls.LoadX509KeyPair(a.Cert, a.Key)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate (--etcd-cert %s, --etcd-key %s): %w", a.Cert, a.Key, err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg, nil
}

// password reads the first line of PasswordFile, which only its owner may
// read or write (like ssh's private keys): a password that others can read
// is no longer a secret, and one they can write lets them choose it.
func (a ClientAuth) password() (string, error) {
	if a.User == "" {
		if a.PasswordFile != "" {
			return "", errors.New("etcd password file (--etcd-password-file) given without a user (--etcd-user)")
		}
		return "", nil
	}
	if a.PasswordFile == "" {
		return "", fmt.Errorf("etcd user %q needs a password file (--etcd-password-file)", a.User)
	}
	f, err := os.Open(a.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("etcd password file (--etcd-password-file): %w", err)
	}
	defer f.Close()
	fi, err := f.Stat() // of the file opened: no swap after the check
	if err != nil {
		return "", fmt.Errorf("etcd password file (--etcd-password-file): %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("etcd password file %s (--etcd-password-file): not a regular file", a.PasswordFile)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("etcd password file %s (--etcd-password-file) has mode %#o: group or others may read or write it; chmod 600 it", a.PasswordFile, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("etcd password file (--etcd-password-file): %w", err)
	}
	p, _, _ := strings.Cut(string(b), "\n")
	p = strings.TrimSuffix(p, "\r")
	if p == "" {
		return "", fmt.Errorf("etcd password file %s: empty", a.PasswordFile)
	}
	return p, nil
}

// checkEndpoints refuses plaintext endpoints when TLS is configured (the
// settings would be ignored for them) and warns about plaintext ones that
// leave the machine: everything in the store, and the password, would
// cross the network in clear.
func checkEndpoints(endpoints []string, a ClientAuth, log *slog.Logger) error {
	for _, e := range endpoints {
		scheme, host := "http", e
		if u, err := url.Parse(e); err == nil && strings.Contains(e, "://") {
			scheme, host = u.Scheme, u.Host
		}
		switch scheme {
		case "https", "unixs":
			continue
		case "http", "unix":
		default:
			return fmt.Errorf("etcd endpoint %q: want http(s)://HOST:PORT, HOST:PORT or unix(s):///path", e)
		}
		if a.TLS() {
			return fmt.Errorf("etcd endpoint %q is plaintext but TLS settings are given: use https:// (or unixs://)", e)
		}
		if scheme == "unix" {
			continue
		}
		h := host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			h = hh
		}
		if !isLoopback(h) {
			msg := "plaintext etcd endpoint off this machine: the desired state crosses the network unencrypted and unauthenticated; use https:// with --etcd-cacert"
			if a.User != "" {
				msg = "plaintext etcd endpoint off this machine: the etcd password and the desired state cross the network in clear; use https:// with --etcd-cacert"
			}
			log.Warn(msg, "endpoint", e)
		}
	}
	return nil
}

// probeTLS connects to each https:// endpoint with the client's TLS
// settings and returns the first handshake failure: an unknown CA, a
// wrong host name, or (TLS 1.3 reports it after the handshake, on the
// first read) the server's demand for a client certificate.
func probeTLS(endpoints []string, cfg *tls.Config) error {
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Scheme != "https" {
			continue
		}
		c := &tls.Config{}
		if cfg != nil {
			c = cfg.Clone()
		}
		d := &net.Dialer{Timeout: 2 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", u.Host, c)
		if err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
		conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return fmt.Errorf("%s: %w", e, err)
		}
	}
	return nil
}

// isLoopback tells whether host (an IP literal or "localhost") is a
// loopback address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
