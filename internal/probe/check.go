package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
)

// httpDoer is what a check needs of an http.Client.
type httpDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// do runs one check of e, bounded by its Timeout.
func (e *entry) do(ctx context.Context) error {
	s := e.t.Spec
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	addr := netip.AddrPortFrom(e.t.Addr, s.Port).String()
	if s.Kind == TCP {
		c, err := e.dial(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	u := &url.URL{Scheme: string(s.Kind), Host: addr}
	// Path was validated as printable ASCII: it goes on the request line
	// as given (query included).
	ru, err := url.ParseRequestURI(s.Path)
	if err != nil {
		return fmt.Errorf("path %q: %w", s.Path, err)
	}
	u.Path, u.RawPath, u.RawQuery = ru.Path, ru.RawPath, ru.RawQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if s.Host != "" {
		req.Host = s.Host
		if a, err := netip.ParseAddr(s.Host); err == nil && a.Is6() {
			req.Host = "[" + s.Host + "]" // RFC 9110 §7.2: an IPv6 literal in brackets
		}
	}
	req.Header.Set("User-Agent", "azgate-probe")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	// Read a little of the body so the server sees a clean close; the
	// rest is dropped with the connection (no keep-alive).
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, bodyLimit))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if rerr != nil {
		return fmt.Errorf("body: %w", rerr)
	}
	return nil
}

// newHTTPClient makes a target's client: no proxy, no redirects, no
// keep-alive (each check dials, as a client would after a failover), the
// timeouts of the spec, and TLS verified against Host or the address
// unless Insecure.
func newHTTPClient(t Target, dial func(ctx context.Context, network, addr string) (net.Conn, error), roots *x509.CertPool) *http.Client {
	s := t.Spec
	name := s.Host
	if name == "" {
		name = t.Addr.String()
	}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            dial,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		TLSHandshakeTimeout:    s.Timeout,
		ResponseHeaderTimeout:  s.Timeout,
		MaxResponseHeaderBytes: 16 << 10,
		TLSClientConfig: &tls.Config{
			ServerName:         name,
			InsecureSkipVerify: s.Insecure,
			RootCAs:            roots,
			MinVersion:         tls.VersionTLS12,
		},
	}
	return &http.Client{
		Transport: tr,
		Timeout:   s.Timeout,
		// A 3xx is the server answering: it counts as up, and following
		// it would check something else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
