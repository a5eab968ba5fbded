package gslbrole

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azgate/azgate/internal/gslb"
)

// Per-source response rate limit over UDP (--rate-limit; off by default).
// An authoritative server answers anyone, and a spoofed source turns its
// answers into a reflection attack on that source; the limit bounds what
// one source network (gslb.SourceNet: /24 for IPv4, /56 for IPv6) gets per
// second. Over the limit, every other query gets an empty truncated answer
// (TC=1, "slip", as BIND's RRL does) so a real client retries over TCP,
// which is not limited here (TCP cannot be spoofed; it has its own
// connection bounds, in total and per source network), and the rest are
// dropped. Both are counted.
const (
	// maxRateSources bounds the buckets; idle ones are swept when it is
	// reached, and if the sweep frees less than a quarter the table starts
	// over (a flood of sources then gets fresh buckets: the limit degrades,
	// memory and CPU do not). Freeing a quarter at least means a full scan
	// happens at most once per maxRateSources/4 new sources: without it, new
	// sources arriving as fast as old ones go idle (65536 per 10 s) would
	// make every one of them scan the whole table under the lock.
	maxRateSources = 1 << 16
	rateIdle       = 10 * time.Second
)

type rateLimiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[netip.Prefix]*rateBucket
	slip        atomic.Uint64
	Dropped     atomic.Uint64 // queries not answered
	Slipped     atomic.Uint64 // queries answered empty with TC=1
}

type rateBucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter allows perSecond answers per source network, with a burst
// of twice that (0: nil, no limit).
func newRateLimiter(perSecond int) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &rateLimiter{rate: float64(perSecond), burst: 2 * float64(perSecond), buckets: map[netip.Prefix]*rateBucket{}}
}

// allow takes a token of src's network.
func (l *rateLimiter) allow(src netip.Addr, now time.Time) bool {
	key := gslb.SourceNet(src)
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= maxRateSources {
			for k, v := range l.buckets {
				if now.Sub(v.last) > rateIdle {
					delete(l.buckets, k)
				}
			}
			if len(l.buckets) > maxRateSources*3/4 {
				clear(l.buckets)
			}
		}
		b = &rateBucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Allow is gslb.ServerConfig.Allow: the server asks it before answering
// a UDP query from src. Over the limit, every other query is slipped (an
// empty TC=1 answer) and the others dropped; both are counted.
func (l *rateLimiter) Allow(src netip.Addr) (answer, slip bool) {
	if l.allow(src, time.Now()) {
		return true, false
	}
	if l.slip.Add(1)%2 == 0 {
		l.Dropped.Add(1)
		return false, false
	}
	l.Slipped.Add(1)
	return false, true
}
