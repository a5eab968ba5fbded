package pathd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// peer is the ordered stream of reports to one other region: a bounded
// queue (full: the oldest report is dropped and counted; the region
// catches up from later reports of the same hops) and one goroutine that
// POSTs batches in order, retrying a batch with backoff until the peer
// takes it, so reports reach each region in the order this server applied
// them (docs/pathcomp.md, "Convergence").
type peer struct {
	region, url string
	token       string
	client      *http.Client
	batch       int
	max         int

	mu       sync.Mutex
	q        []fwdReport // q[head:] waits
	head     int
	inflight int
	wake     chan struct{}
	sent     uint64 // reports the peer took
	dropped  uint64 // dropped from a full queue
	errors   uint64 // failed POSTs (each retried)
	refused  uint64 // reports of batches the peer refused as invalid (400): not retried
	last     time.Time
}

func newPeer(p Peer, cfg Config) *peer {
	return &peer{region: p.Region, url: strings.TrimSuffix(p.URL, "/") + "/v1/forward", token: cfg.PeerTokens[p.Region],
		client: cfg.Client, batch: cfg.Batch, max: cfg.QueueLen, wake: make(chan struct{}, 1)}
}

// push queues r; the caller holds Server.mu, so pushes are in apply order.
func (p *peer) push(r fwdReport) {
	p.mu.Lock()
	if len(p.q)-p.head >= p.max {
		p.q[p.head] = fwdReport{}
		p.head++
		p.dropped++
	}
	if p.head > len(p.q)/2 && p.head > 1024 { // compact: keep memory bounded by max
		n := copy(p.q, p.q[p.head:])
		clear(p.q[n:])
		p.q, p.head = p.q[:n], 0
	}
	p.q = append(p.q, r)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take removes up to batch reports from the head of the queue.
func (p *peer) take() []fwdReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(p.q)-p.head, p.batch)
	if n == 0 {
		return nil
	}
	b := make([]fwdReport, n)
	copy(b, p.q[p.head:p.head+n])
	clear(p.q[p.head : p.head+n])
	p.head += n
	if p.head == len(p.q) {
		p.q, p.head = p.q[:0], 0
	}
	p.inflight = n
	return b
}

// depth is the reports waiting, in flight included.
func (p *peer) depth() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.q) - p.head + p.inflight
}

func (p *peer) run(ctx context.Context, cfg Config) {
	backoff := 100 * time.Millisecond
	for {
		b := p.take()
		if b == nil {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
				continue
			}
		}
		for {
			retry, err := p.post(ctx, b)
			if err == nil || !retry {
				p.mu.Lock()
				p.inflight = 0
				if err == nil {
					p.sent += uint64(len(b))
					p.last = time.Now()
				} else {
					p.refused += uint64(len(b))
				}
				p.mu.Unlock()
				if err != nil {
					cfg.Log.Error("peer refused a forward batch; dropped", "peer", p.region, "reports", len(b), "err", err)
				}
				backoff = 100 * time.Millisecond
				break
			}
			p.mu.Lock()
			p.errors++
			p.mu.Unlock()
			cfg.Log.Warn("forward failed; retrying", "peer", p.region, "reports", len(b), "in", backoff, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// post sends one batch. retry says whether a failure may pass (network,
// 5xx, 401 while tokens are rotated, 429); a 400 or 413 would fail again.
func (p *peer) post(ctx context.Context, b []fwdReport) (retry bool, err error) {
	body, err := json.Marshal(b)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusOK:
		return false, nil
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge:
		return false, fmt.Errorf("%s: %s: %s", p.url, resp.Status, bytes.TrimSpace(msg))
	default:
		return true, fmt.Errorf("%s: %s: %s", p.url, resp.Status, bytes.TrimSpace(msg))
	}
}
