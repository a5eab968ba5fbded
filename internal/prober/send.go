package prober

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/azgate/azgate/internal/pathcomp"
)

// maxBackoff bounds the wait between failed POSTs (and failed
// resolutions): a region that comes back, or a DNS answer that moved, is
// used within about this long.
const maxBackoff = 2 * time.Second

// sendLoop posts the queue to pathd in batches, oldest first, until ctx
// ends. A batch leaves the queue only when a pathd answered 2xx for it
// (or 400: it can never be accepted); on any other outcome the host is
// resolved again and the batch retried after a backoff.
func (p *Prober) sendLoop(ctx context.Context) {
	client := p.httpClient()
	defer client.CloseIdleConnections()
	backoff := time.Duration(0)
	batch := p.cfg.Batch
	for ctx.Err() == nil {
		ms, last := p.peek(batch)
		if len(ms) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-p.kick:
			}
			continue
		}
		err := p.postOnce(ctx, client, ms)
		if err != nil && ctx.Err() != nil {
			return // stopping: the POST was cut short, not failed
		}
		var se *statusError
		switch {
		case err == nil:
			p.ack(last, len(ms), false)
			backoff = 0
			batch = p.cfg.Batch
			continue
		case errors.As(err, &se) && se.code == http.StatusRequestEntityTooLarge && batch > 1:
			batch /= 2 // pathd takes smaller bodies than we send: halve and resend now
			continue
		case errors.As(err, &se) && (se.code == http.StatusBadRequest || se.code == http.StatusRequestEntityTooLarge):
			// The batch can never be accepted: keeping it would block every
			// later report behind it.
			p.cfg.Log.Error("pathd refused a batch; dropped", "measurements", len(ms), "err", err)
			p.ack(last, len(ms), true)
			continue
		}
		p.mu.Lock()
		p.stats.PostErrors++
		p.mu.Unlock()
		p.res.invalidate()
		backoff = min(max(2*backoff, 100*time.Millisecond), maxBackoff)
		p.cfg.Log.Warn("report failed; retrying", "measurements", len(ms), "in", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// peek returns up to n measurements from the head of the queue and the
// sequence number of the last one.
func (p *Prober) peek(n int) ([]pathcomp.Measurement, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, len(p.queue))
	out := make([]pathcomp.Measurement, n)
	for i := range n {
		out[i] = p.queue[i].m
	}
	if n == 0 {
		return nil, 0
	}
	return out, p.queue[n-1].seq
}

// ack removes every queued measurement up to seq last (those the queue
// still holds: overflow may have dropped some meanwhile).
func (p *Prober) ack(last uint64, n int, rejected bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := 0
	for i < len(p.queue) && p.queue[i].seq <= last {
		i++
	}
	p.queue = p.queue[i:]
	if rejected {
		p.stats.Rejected += uint64(n)
		return
	}
	p.stats.Sent += uint64(n)
	p.stats.Posts++
}

// statusError is a POST pathd answered with a non-2xx status.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("pathd answered %d: %s", e.code, e.body)
}

// postOnce resolves the report host (from the cache while its TTL lasts)
// and POSTs ms to it.
func (p *Prober) postOnce(ctx context.Context, client *http.Client, ms []pathcomp.Measurement) error {
	addr, err := p.resolve(ctx)
	if err != nil {
		return err
	}
	body, err := json.Marshal(ms)
	if err != nil {
		return err
	}
	u := *p.url
	u.Host = net.JoinHostPort(addr.String(), p.port)
	rctx, cancel := context.WithTimeout(ctx, p.cfg.PostTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Host = p.url.Host // the name, as a virtual host would expect it
	req.Header.Set("Content-Type", "application/json")
	if p.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return &statusError{resp.StatusCode, string(bytes.TrimSpace(msg))}
	}
	return nil
}

// resolve returns the report host's address, counting resolutions and
// moves.
func (p *Prober) resolve(ctx context.Context) (netip.Addr, error) {
	before := p.res.current()
	addr, fresh, err := p.res.get(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.stats.ResolveErrs++
		if !addr.IsValid() {
			return addr, fmt.Errorf("resolving %s: %w", p.host, err)
		}
		p.cfg.Log.Warn("resolving the report host failed; using the last address", "host", p.host, "addr", addr, "err", err)
		return addr, nil
	}
	if fresh {
		p.stats.Resolves++
		if before.IsValid() && before != addr {
			p.stats.Moves++
			p.cfg.Log.Info("report host moved", "host", p.host, "from", before, "to", addr)
		}
	}
	return addr, nil
}

// httpClient: no keep-alive, so that every POST is a new flow (the
// router's ECMP spreads them over the region's servers, and a dead server
// or a moved name costs one POST, not a pinned connection's timeouts);
// no redirects; no proxy from the environment.
func (p *Prober) httpClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{ServerName: p.host, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: false,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
