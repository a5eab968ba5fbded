package lab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/netns"
)

// Dialer returns a DialContext that opens its sockets inside a namespace
// (the socket belongs to the namespace it was created in; the rest of the
// connection's life does not care which thread it runs on).
func Dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(ns, func() error {
			var err error
			d := net.Dialer{}
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// HTTPClient is a client whose connections start in a namespace; every
// request opens a new TCP connection.
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{DialContext: Dialer(ns), DisableKeepAlives: true},
	}
}

// Get fetches url from a lab node and returns the body.
func (l *Lab) Get(ctx context.Context, node, url string, timeout time.Duration) (string, error) {
	n := l.Topo.Node(node)
	if n == nil {
		return "", fmt.Errorf("no lab node %q", node)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := HTTPClient(n.Netns, timeout).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), nil
}

// Sample is one request of a stream.
type Sample struct {
	Start, End time.Time
	Answer     string // body, "" on failure
	Err        string
}

// Stream starts a request to url from node every interval, each on a new
// TCP connection and in its own goroutine (so one slow request does not
// delay the next: the samples are a timeline), until ctx ends; requests
// still in flight then are waited for.
func (l *Lab) Stream(ctx context.Context, node, url string, interval, timeout time.Duration) []Sample {
	n := l.Topo.Node(node)
	hc := HTTPClient(n.Netns, timeout)
	var mu sync.Mutex
	var out []Sample
	var wg sync.WaitGroup
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return out
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Sample{Start: time.Now()}
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			resp, err := hc.Do(req)
			if err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil && resp.StatusCode == http.StatusOK {
					s.Answer = strings.TrimSpace(string(b))
				} else {
					err = fmt.Errorf("HTTP %d %v", resp.StatusCode, rerr)
				}
			}
			if err != nil {
				s.Err = err.Error()
			}
			s.End = time.Now()
			mu.Lock()
			out = append(out, s)
			mu.Unlock()
		}()
	}
}
