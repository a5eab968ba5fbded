package bwstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key layout in an AZ's Redis (every name is checked against
// [A-Za-z0-9._-]{1,63} first, so no key part can hold ':' or spaces; keys
// and values only ever travel as go-redis arguments, never spliced into a
// command or a script):
//
//	azg:bw:<az>:rep:<reporter>  hash, PEXPIRE = the report's TTL
//	    "<eip>/<e|i>" -> "<bytes/s> <packets/s> <drop bytes/s>"
//	    "_ttl"        -> TTL in ms (age = _ttl - PTTL, on Redis's clock)
//	azg:bw:<az>:reporters       set of reporters that may have a live report;
//	                            readers drop members whose hash is gone
//	azg:bw:<az>:lim:<host>      hash, PEXPIRE = the limits' TTL
//	    "<eip>/<e|i>" -> "<rate bytes/s> <burst bytes>"
//	    "_gen" -> generation, "_ttl" -> TTL in ms, "_issued" -> unix ms
//	azg:bw:<az>:gen:<host>      last accepted generation (no TTL: fencing
//	                            outlives the limits)
const keyPrefix = "azg:bw:"

func repKey(az, reporter string) string { return keyPrefix + az + ":rep:" + reporter }
func reportersKey(az string) string     { return keyPrefix + az + ":reporters" }
func limKey(az, host string) string     { return keyPrefix + az + ":lim:" + host }
func genKey(az, host string) string     { return keyPrefix + az + ":gen:" + host }

// hsetChunk bounds the arguments of one HSET in a pipeline.
const hsetChunk = 1024

// RedisConfig says how to reach one AZ's redis-server.
type RedisConfig struct {
	// Network is "unix" (Addr is a socket path) or "tcp" (host:port).
	Network string
	Addr    string
	// Username and Password for AUTH (ACL user, or requirepass with no
	// user); empty means none.
	Username, Password string
	// TLS, if not nil, is used for every connection (tcp only).
	TLS *tls.Config
	// CallTimeout bounds every Store call and every network read/write
	// (default 2 s).
	CallTimeout time.Duration
	// PoolSize is go-redis's connection pool size (default 4).
	PoolSize int
}

// RedisConfigFromURL reads redis://[user:pass@]host:port, rediss://... (TLS)
// or unix://[user:pass@]/path/to/socket. A password is better given through
// a file than on a command line; see docs/bandwidth.md.
func RedisConfigFromURL(u string) (RedisConfig, error) {
	o, err := redis.ParseURL(u)
	if err != nil {
		return RedisConfig{}, fmt.Errorf("bwstore: redis url: %w", err)
	}
	if o.DB != 0 {
		return RedisConfig{}, fmt.Errorf("bwstore: redis url: database %d: only database 0 is used", o.DB)
	}
	return RedisConfig{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, TLS: o.TLSConfig}, nil
}

// Redis is the Store on one redis-server (one per AZ, though AZ names in
// the keys let several share one).
type Redis struct {
	c       *redis.Client
	timeout time.Duration
}

// NewRedis connects lazily (go-redis dials on first use); Ping checks.
func NewRedis(cfg RedisConfig) (*Redis, error) {
	if cfg.Network != "unix" && cfg.Network != "tcp" {
		return nil, fmt.Errorf("bwstore: redis network %q: want unix or tcp", cfg.Network)
	}
	if cfg.Addr == "" {
		return nil, errors.New("bwstore: redis address is empty")
	}
	if cfg.TLS != nil && cfg.Network != "tcp" {
		return nil, errors.New("bwstore: redis TLS is for tcp only")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Second
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 4
	}
	c := redis.NewClient(&redis.Options{
		Network:               cfg.Network,
		Addr:                  cfg.Addr,
		Username:              cfg.Username,
		Password:              cfg.Password,
		TLSConfig:             cfg.TLS,
		DialTimeout:           cfg.CallTimeout,
		ReadTimeout:           cfg.CallTimeout,
		WriteTimeout:          cfg.CallTimeout,
		ContextTimeoutEnabled: true,
		PoolSize:              cfg.PoolSize,
		MaxRetries:            1,
		DisableIdentity:       true, // no CLIENT SETINFO: older servers and ACLs refuse it
		Protocol:              2,
	})
	return &Redis{c: c, timeout: cfg.CallTimeout}, nil
}

// Ping checks that the server answers and accepts the credentials.
func (r *Redis) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bwstore: redis ping: %w", err)
	}
	return nil
}

// Client is the underlying go-redis client (tests read INFO through it).
func (r *Redis) Client() *redis.Client { return r.c }

// Close implements Store.
func (r *Redis) Close() error { return r.c.Close() }

// WriteReports implements Store: one MULTI/EXEC pipeline (one round trip)
// that replaces the reporter's hash, sets its TTL and indexes the reporter.
func (r *Redis) WriteReports(ctx context.Context, az, reporter string, ttl time.Duration, rates []Rate) error {
	if err := checkReports(az, reporter, ttl, rates); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	key := repKey(az, reporter)
	var added *redis.IntCmd
	var card *redis.IntCmd
	_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		args := make([]any, 0, 2*hsetChunk)
		for i, x := range rates {
			args = append(args, field(x.EIP, x.Dir), encodeUints(x.BytesPerSec, x.PacketsPerSec, x.DropBytesPerSec))
			if len(args) == 2*hsetChunk || i == len(rates)-1 {
				p.HSet(ctx, key, args...)
				args = make([]any, 0, 2*hsetChunk)
			}
		}
		p.HSet(ctx, key, "_ttl", ttl.Milliseconds())
		p.PExpire(ctx, key, ttl)
		added = p.SAdd(ctx, reportersKey(az), reporter)
		card = p.SCard(ctx, reportersKey(az))
		return nil
	})
	if err != nil {
		return fmt.Errorf("bwstore: redis: write report of %s in %s: %w", reporter, az, err)
	}
	if added.Val() == 1 && card.Val() > MaxReporters {
		// A new reporter over the bound: take the write back. Members
		// whose report expired count until a ReadReports prunes them.
		_, err := r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, key)
			p.SRem(ctx, reportersKey(az), reporter)
			return nil
		})
		if err != nil {
			return fmt.Errorf("bwstore: redis: write report of %s in %s: undo over the reporter bound: %w", reporter, az, err)
		}
		return fmt.Errorf("%w: az %s: %d reporters indexed, at most %d (reporter %s)", ErrTooMany, az, card.Val()-1, MaxReporters, reporter)
	}
	return nil
}

// pruneScript drops a reporter from the index only if its hash is gone,
// so a write racing the reader is not lost.
var pruneScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.call('SREM', KEYS[1], ARGV[1])
end
return 0`)

// readChunk is how many reporters one ReadReports round trip covers: a
// round trip is bounded by CallTimeout, so a whole AZ (100k EIPs, a few MB)
// is read in several, each well inside it.
const readChunk = 8

// ReadReports implements Store: SMEMBERS, then pipelines of HGETALL and
// PTTL, readChunk reporters each. Each round trip is bounded by the call
// timeout, the whole read by ctx.
func (r *Redis) ReadReports(ctx context.Context, az string) (Snapshot, error) {
	if err := checkName("az", az); err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{AZ: az}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	members, err := r.c.SMembers(cctx, reportersKey(az)).Result()
	cancel()
	if err != nil {
		return s, fmt.Errorf("bwstore: redis: reporters of %s: %w", az, err)
	}
	if len(members) > MaxReporters {
		return s, fmt.Errorf("%w: az %s: %d reporters indexed, at most %d", ErrTooMany, az, len(members), MaxReporters)
	}
	members = slices.DeleteFunc(members, func(m string) bool {
		if checkName("reporter", m) != nil { // not ours: never built into a key
			s.Malformed = append(s.Malformed, fmt.Sprintf("%.80q: not a reporter name", m))
			return true
		}
		return false
	})
	slices.Sort(members) // the snapshot's order: reporter, then EIP and direction
	var gone []string
	for lo := 0; lo < len(members); lo += readChunk {
		chunk := members[lo:min(lo+readChunk, len(members))]
		g, err := r.readChunk(ctx, az, chunk, &s)
		if err != nil {
			return s, err
		}
		gone = append(gone, g...)
	}
	if len(gone) > 0 {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		_, _ = r.c.Pipelined(cctx, func(p redis.Pipeliner) error {
			for _, m := range gone {
				pruneScript.Run(cctx, p, []string{reportersKey(az), repKey(az, m)}, m)
			}
			return nil
		})
		cancel()
	}
	return s, nil
}

// readChunk appends the reports of members to s and returns the members
// whose report is gone.
func (r *Redis) readChunk(ctx context.Context, az string, members []string, s *Snapshot) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	type pair struct {
		all  *redis.MapStringStringCmd
		pttl *redis.DurationCmd
	}
	cmds := make([]pair, len(members))
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			cmds[i] = pair{p.HGetAll(ctx, repKey(az, m)), p.PTTL(ctx, repKey(az, m))}
		}
		return nil
	})
	fail := func(err error) error {
		return fmt.Errorf("bwstore: redis: read reports of %s (reporters %s..%s): %w", az, members[0], members[len(members)-1], err)
	}
	if err != nil && !wrongType(err) {
		return nil, fail(err)
	}
	var gone []string
	for i, m := range members {
		if err := cmds[i].all.Err(); err != nil {
			if !wrongType(err) {
				return nil, fail(err)
			}
			// The key is not a hash of ours: this report only.
			s.Malformed = append(s.Malformed, fmt.Sprintf("%s: %.120s", m, err))
			continue
		}
		if err := cmds[i].pttl.Err(); err != nil {
			return nil, fail(err)
		}
		h := cmds[i].all.Val()
		pttl := cmds[i].pttl.Val()
		if len(h) == 0 {
			gone = append(gone, m)
			continue
		}
		rates, age, err := decodeReport(h, pttl)
		if err != nil {
			s.Malformed = append(s.Malformed, m+": "+err.Error())
			continue
		}
		for _, x := range rates {
			s.Reports = append(s.Reports, Report{Reporter: m, Rate: x, Age: age})
		}
	}
	return gone, nil
}

// wrongType says err is the server's answer that one key holds another
// type: about that key only, where any other error (unreachable, timeout,
// NOAUTH, OOM, LOADING) is about the whole call.
func wrongType(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// decodeReport reads back one reporter's hash, checked as WriteReports
// checks what it writes: fields and values as written, at most
// MaxRatesPerReport of them, a TTL within bounds and no longer than the
// key's remaining PTTL says. The rates come sorted by EIP and direction.
func decodeReport(h map[string]string, pttl time.Duration) ([]Rate, time.Duration, error) {
	if len(h) > MaxRatesPerReport+1 {
		return nil, 0, fmt.Errorf("%d fields, at most %d", len(h), MaxRatesPerReport+1)
	}
	age, err := decodeAge(h["_ttl"], pttl)
	if err != nil {
		return nil, 0, err
	}
	rates := make([]Rate, 0, len(h)-1)
	for f, v := range h {
		if f == "_ttl" {
			continue
		}
		a, d, err := parseField(f)
		if err != nil {
			return nil, 0, err
		}
		x := Rate{EIP: a, Dir: d}
		if err := decodeUints(v, &x.BytesPerSec, &x.PacketsPerSec, &x.DropBytesPerSec); err != nil {
			return nil, 0, fmt.Errorf("%s: %v", f, err)
		}
		rates = append(rates, x)
	}
	slices.SortFunc(rates, compareRate)
	return rates, age, nil
}

// decodeAge reads a hash's _ttl (ms) and turns it into the entry's age
// with the key's remaining PTTL. A TTL out of 1 ms..MaxTTL, or a PTTL
// above it (the key's expiry moved by someone else), is not what a writer
// of this package leaves: refused rather than read as a fresh entry.
func decodeAge(ttl string, pttl time.Duration) (time.Duration, error) {
	if pttl < 0 {
		return 0, errors.New("no expiry") // -1; -2 (gone) has no fields
	}
	ms, err := strconv.ParseUint(ttl, 10, 64)
	if err != nil || ms < 1 || ms > uint64(MaxTTL/time.Millisecond) {
		return 0, fmt.Errorf("_ttl %.24q: want 1..%d ms", ttl, MaxTTL/time.Millisecond)
	}
	d := time.Duration(ms) * time.Millisecond
	if pttl > d {
		return 0, fmt.Errorf("expires in %v, after its TTL %v", pttl, d)
	}
	return d - pttl, nil
}

// writeLimitsScript checks the generation against the fencing key and
// replaces the limits hash in one step. ARGV: gen, ttl ms, issued ms, then
// field/value pairs. It answers nil when it wrote, and the fence as stored
// when the generation is not above it. A fence that is not a generation a
// writer can have set (a corrupt store) is an error: never a silent
// success (a huge fence converted to an integer reply could read as one),
// never a stale refusal (which a manager takes for a newer manager).
var writeLimitsScript = redis.NewScript(`
local raw = redis.call('GET', KEYS[2])
local cur = 0
if raw then
  cur = tonumber(raw)
  if not cur or not string.match(raw, '^[0-9]+$') or cur < 1 or cur > 9007199254740991 then
    return redis.error_reply('ERR fence ' .. KEYS[2] .. ' holds ' .. string.sub(raw, 1, 40) .. ', not a generation 1..2^53-1')
  end
end
if tonumber(ARGV[1]) <= cur then return raw end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_gen', ARGV[1], '_ttl', ARGV[2], '_issued', ARGV[3])
local n = #ARGV
local i = 4
while i <= n do
  local j = math.min(i + 999, n)
  redis.call('HSET', KEYS[1], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return false`)

// WriteLimits implements Store.
func (r *Redis) WriteLimits(ctx context.Context, az, host string, ttl time.Duration, lim Limits) error {
	if err := checkLimits(az, host, ttl, lim); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	args := make([]any, 0, 3+2*len(lim.Limits))
	args = append(args, strconv.FormatUint(lim.Generation, 10), ttl.Milliseconds(), lim.Issued.UnixMilli())
	for _, l := range lim.Limits {
		args = append(args, field(l.EIP, l.Dir), encodeUints(l.RateBytes, l.BurstBytes))
	}
	stored, err := writeLimitsScript.Run(ctx, r.c, []string{limKey(az, host), genKey(az, host)}, args...).Text()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bwstore: redis: write limits of %s in %s: %w", host, az, err)
	}
	g, err := strconv.ParseUint(stored, 10, 64)
	if err != nil {
		return fmt.Errorf("bwstore: redis: write limits of %s in %s: stored generation %.40q: %v", host, az, stored, err)
	}
	return &StaleGenerationError{AZ: az, Host: host, Given: lim.Generation, Stored: g}
}

// ReadLimits implements Store.
func (r *Redis) ReadLimits(ctx context.Context, az, host string) (HostLimits, bool, error) {
	if err := checkName("az", az); err != nil {
		return HostLimits{}, false, err
	}
	if err := checkName("host", host); err != nil {
		return HostLimits{}, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var all *redis.MapStringStringCmd
	var pttl *redis.DurationCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, limKey(az, host))
		pttl = p.PTTL(ctx, limKey(az, host))
		return nil
	})
	if err != nil {
		return HostLimits{}, false, fmt.Errorf("bwstore: redis: read limits of %s in %s: %w", host, az, err)
	}
	h := all.Val()
	if len(h) == 0 {
		return HostLimits{}, false, nil
	}
	hl, err := decodeLimits(h, pttl.Val())
	if err != nil {
		return HostLimits{}, false, fmt.Errorf("bwstore: redis: limits of %s in %s: %w", host, az, err)
	}
	return hl, true, nil
}

// decodeLimits reads back a host's limits hash, checked as WriteLimits
// checks what it writes (fields as written, generation 1..MaxGeneration,
// TTL, rate and burst bounds, at most MaxRatesPerReport limits): the host
// enforces what it reads, so nothing a writer could not have written gets
// through. The limits come sorted.
func decodeLimits(h map[string]string, pttl time.Duration) (HostLimits, error) {
	var hl HostLimits
	if len(h) > MaxRatesPerReport+3 {
		return hl, fmt.Errorf("%d fields, at most %d", len(h), MaxRatesPerReport+3)
	}
	var err error
	if hl.Generation, err = decodeGeneration(h["_gen"]); err != nil {
		return hl, err
	}
	if hl.Age, err = decodeAge(h["_ttl"], pttl); err != nil {
		return hl, err
	}
	i, err := strconv.ParseInt(h["_issued"], 10, 64)
	if err != nil {
		return hl, fmt.Errorf("_issued %.24q: not a time in unix ms", h["_issued"])
	}
	hl.Issued = time.UnixMilli(i)
	hl.Limits.Limits = make([]Limit, 0, len(h)-3)
	for f, v := range h {
		if f == "_gen" || f == "_ttl" || f == "_issued" {
			continue
		}
		a, d, err := parseField(f)
		if err != nil {
			return hl, err
		}
		l := Limit{EIP: a, Dir: d}
		if err := decodeUints(v, &l.RateBytes, &l.BurstBytes); err != nil {
			return hl, fmt.Errorf("%s: %v", f, err)
		}
		if l.RateBytes > MaxLimitRate || l.BurstBytes > MaxLimitBurst {
			return hl, fmt.Errorf("%s: rate %d bytes/s, burst %d bytes: at most %d and %d", f, l.RateBytes, l.BurstBytes, uint64(MaxLimitRate), uint64(MaxLimitBurst))
		}
		hl.Limits.Limits = append(hl.Limits.Limits, l)
	}
	sortLimits(hl.Limits.Limits)
	return hl, nil
}

func decodeGeneration(v string) (uint64, error) {
	g, err := strconv.ParseUint(v, 10, 64)
	if err != nil || g < 1 || g > MaxGeneration {
		return 0, fmt.Errorf("_gen %.24q: want 1..2^53-1", v)
	}
	return g, nil
}

// LimitsGeneration implements Store: one HGET.
func (r *Redis) LimitsGeneration(ctx context.Context, az, host string) (uint64, bool, error) {
	if err := checkName("az", az); err != nil {
		return 0, false, err
	}
	if err := checkName("host", host); err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	v, err := r.c.HGet(ctx, limKey(az, host), "_gen").Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("bwstore: redis: limits generation of %s in %s: %w", host, az, err)
	}
	g, err := decodeGeneration(v)
	if err != nil {
		return 0, false, fmt.Errorf("bwstore: redis: limits generation of %s in %s: %w", host, az, err)
	}
	return g, true, nil
}
