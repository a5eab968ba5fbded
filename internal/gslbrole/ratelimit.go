package gslbrole

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Response rate limiting (RRL) over UDP, on by default. An authoritative
// server answers anyone, and a spoofed source turns its answers into a
// reflection attack on that source, amplified by the size of the answer
// (about 30 times for a large record set: a 40-byte query, a 1200-byte
// answer). As BIND's and Knot's RRL do, the limit counts the answers to
// one client network (an IPv4 /24, an IPv6 /56 by default) per response
// class: the same name and type, every NXDOMAIN, every error (REFUSED,
// FORMERR, SERVFAIL, NOTIMP). A resolver asking many names is not slowed,
// a flood of one large answer is. Over the limit every Slip-th answer is
// replaced by an empty one with TC=1 (a real client retries over TCP,
// which is not limited here: TCP cannot be spoofed and has its own
// connection bounds), and the others are dropped. All counted.
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

// RRL is the response rate limit's configuration (the --rrl-* flags).
type RRL struct {
	// ResponsesPerSecond per client network and response class; 0: off.
	ResponsesPerSecond int
	// Slip: every Slip-th answer over the limit is sent empty with TC=1,
	// the others dropped; 1 slips all, 0 none (all dropped).
	Slip int
	// Window: a class that was quiet gets at most ResponsesPerSecond x
	// Window answers at once (the bucket's depth).
	Window time.Duration
	// IPv4Prefix and IPv6Prefix are the client network's length.
	IPv4Prefix, IPv6Prefix int
}

// DefaultRRL is on: 20 answers per second of one class to one client
// network is far more than a resolver that caches asks (it asks a name
// again after its TTL), and caps a reflection flood at that rate.
var DefaultRRL = RRL{ResponsesPerSecond: 20, Slip: 2, Window: 2 * time.Second, IPv4Prefix: 24, IPv6Prefix: 56}

// Validate checks the limits; errors name the flag.
func (c RRL) Validate() error {
	switch {
	case c.ResponsesPerSecond < 0:
		return fmt.Errorf("gslb: --rrl-responses-per-second %d: want 0 (off) or more", c.ResponsesPerSecond)
	case c.ResponsesPerSecond == 0:
		return nil // off: the other knobs do not matter
	case c.Slip < 0 || c.Slip > 10:
		return fmt.Errorf("gslb: --rrl-slip %d: want 0 (drop all) to 10", c.Slip)
	case (c.Window < time.Second || c.Window > time.Hour):
		return fmt.Errorf("gslb: --rrl-window %v: want 1s to 1h", c.Window)
	case c.IPv4Prefix < 8 || c.IPv4Prefix > 32:
		return fmt.Errorf("gslb: --rrl-ipv4-prefix %d: want 8 to 32", c.IPv4Prefix)
	case c.IPv6Prefix < 16 || c.IPv6Prefix > 128:
		return fmt.Errorf("gslb: --rrl-ipv6-prefix %d: want 16 to 128", c.IPv6Prefix)
	}
	return nil
}

type rateLimiter struct {
	rate, burst float64
	slipEvery   uint64
	v4, v6      int
	seed        maphash.Seed
	mu          sync.Mutex
	buckets     map[rateKey]*rateBucket
	slip        atomic.Uint64
	Dropped     atomic.Uint64 // answers not sent
	Slipped     atomic.Uint64 // answers replaced by an empty one with TC=1
}

// rateKey is a client network and a response class (a hash of the
// class's kind, name and type).
type rateKey struct {
	net   netip.Prefix
	class uint64
}

type rateBucket struct {
	tokens float64
	last   time.Time
}

// newRateLimiter returns the limiter of c (nil when off).
func newRateLimiter(c RRL) *rateLimiter {
	if c.ResponsesPerSecond <= 0 {
		return nil
	}
	return &rateLimiter{rate: float64(c.ResponsesPerSecond), burst: float64(c.ResponsesPerSecond) * c.Window.Seconds(),
		slipEvery: uint64(c.Slip), v4: c.IPv4Prefix, v6: c.IPv6Prefix, seed: maphash.MakeSeed(),
		buckets: map[rateKey]*rateBucket{}}
}

// Response classes.
const (
	classAnswer   = 1 // NOERROR, with or without records: keyed by name and type
	classNXDomain = 2 // every NXDOMAIN of the client network
	classError    = 3 // every other RCODE, and answers we cannot read
)

// class is resp's response class, hashed.
func (l *rateLimiter) class(resp []byte) uint64 {
	var key [256 + 3]byte // kind, type, lower-cased name
	n := 0
	key[0] = classError
	if len(resp) >= 12 {
		switch resp[3] & 0xF {
		case 0:
			key[0] = classAnswer
		case 3:
			key[0] = classNXDomain
		}
	}
	if key[0] == classAnswer {
		// The question: the name (uncompressed: it is the first) and
		// type, lower-cased so 0x20 spellings share a bucket.
		off, ok := 12, binary.BigEndian.Uint16(resp[4:]) == 1
		n = 3
		for ok {
			if off >= len(resp) || resp[off] > 63 {
				ok = false
				break
			}
			ln := int(resp[off])
			if ln == 0 {
				break
			}
			if off+1+ln > len(resp) || n+1+ln > len(key) {
				ok = false
				break
			}
			key[n] = byte(ln)
			for i, b := range resp[off+1 : off+1+ln] {
				if 'A' <= b && b <= 'Z' {
					b += 'a' - 'A'
				}
				key[n+1+i] = b
			}
			n += 1 + ln
			off += 1 + ln
		}
		if ok && off+3 <= len(resp) {
			key[1], key[2] = resp[off+1], resp[off+2]
		} else {
			key[0], n = classError, 0
		}
	}
	return maphash.Bytes(l.seed, key[:max(n, 1)])
}

// allow takes a token of the bucket of src's network and resp's class.
func (l *rateLimiter) allow(src netip.Addr, resp []byte, now time.Time) bool {
	src = src.Unmap()
	bits := l.v6
	if src.Is4() {
		bits = l.v4
	}
	n, _ := src.Prefix(bits)
	key := rateKey{net: n, class: l.class(resp)}
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

// Allow is dnsserver.ServerConfig.Allow: the server asks it before sending the
// UDP answer resp to src. Over the limit, every Slip-th answer is slipped
// (an empty TC=1 answer) and the others dropped; both are counted.
func (l *rateLimiter) Allow(src netip.Addr, resp []byte) (answer, slip bool) {
	if l.allow(src, resp, time.Now()) {
		return true, false
	}
	if l.slipEvery == 0 || l.slip.Add(1)%l.slipEvery != 0 {
		l.Dropped.Add(1)
		return false, false
	}
	l.Slipped.Add(1)
	return false, true
}
