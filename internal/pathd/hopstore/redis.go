package hopstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/azgate/azgate/internal/pathcomp"
)

// Key layout in a cluster's Redis (CLUSTER is checked like a node name,
// [A-Za-z0-9._-]{1,63}; keys and values only travel as go-redis
// arguments, never spliced into a command or a script):
//
//	azg:pd:CLUSTER:hops  hash  "FROM TO" -> "1 ORIGIN RTTMS LOSS UP LASTNS"
//	azg:pd:CLUSTER:ver   string, the last version given to a row
//	azg:pd:CLUSTER:vers  zset  "FROM TO" scored by its row's version
//
// A Save gives each row the next version (one Lua script: the rows and
// their versions change together), so a reader that remembers the highest
// version it read asks for exactly the rows written since
// (ZRANGEBYSCORE). The zset holds one member per hop, so nothing is
// trimmed and no reader can miss a change. Hash fields have no TTL before
// Redis 7.4: Expire deletes old rows.
const keyPrefix = "azg:pd:"

// Redis is the Store on a cluster's Redis primary, with replicas Load
// reads from when the primary does not answer.
type Redis struct {
	cluster  string
	hops     string
	ver      string
	vers     string
	primary  *redis.Client
	replicas []*redis.Client
	names    []string // "primary", "replica 1", ... for Loaded.From
	timeout  time.Duration
}

// Timeout is each call's bound (one round trip or script).
const Timeout = 2 * time.Second

// Config says how to reach one redis-server of a cluster. It is pathd's
// own (not the bandwidth store's): the hop store shares nothing with
// bwstore but the go-redis library.
type Config struct {
	// Network is "unix" (Addr is a socket path) or "tcp" (host:port).
	Network string
	Addr    string
	// Username and Password for AUTH (ACL user, or requirepass with no
	// user); empty means none.
	Username, Password string
	// TLS, if not nil, is used for every connection (tcp only).
	TLS *tls.Config
	// PoolSize is go-redis's connection pool size (default 4).
	PoolSize int
}

// ConfigFromURL reads redis://[user:pass@]host:port, rediss://... (TLS) or
// unix://[user:pass@]/path/to/socket; only database 0 is used.
func ConfigFromURL(u string) (Config, error) {
	o, err := redis.ParseURL(u)
	if err != nil {
		return Config{}, fmt.Errorf("hopstore: redis url: %w", err)
	}
	if o.DB != 0 {
		return Config{}, fmt.Errorf("hopstore: redis url: database %d: only database 0 is used", o.DB)
	}
	return Config{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, TLS: o.TLSConfig}, nil
}

// client checks c and returns its go-redis client, which dials lazily,
// every dial, read and write bounded by Timeout.
func (c Config) client() (*redis.Client, error) {
	if c.Network != "unix" && c.Network != "tcp" {
		return nil, fmt.Errorf("redis network %q: want unix or tcp", c.Network)
	}
	if c.Addr == "" {
		return nil, errors.New("redis address is empty")
	}
	if c.TLS != nil && c.Network != "tcp" {
		return nil, errors.New("redis TLS is for tcp only")
	}
	if c.PoolSize <= 0 {
		c.PoolSize = 4
	}
	return redis.NewClient(&redis.Options{
		Network:               c.Network,
		Addr:                  c.Addr,
		Username:              c.Username,
		Password:              c.Password,
		TLSConfig:             c.TLS,
		DialTimeout:           Timeout,
		ReadTimeout:           Timeout,
		WriteTimeout:          Timeout,
		ContextTimeoutEnabled: true,
		PoolSize:              c.PoolSize,
		MaxRetries:            1,
		DisableIdentity:       true, // no CLIENT SETINFO: older servers and ACLs refuse it
		Protocol:              2,
	}), nil
}

// NewRedis returns the store of cluster on primary, reading from the
// replicas at Load when the primary fails. go-redis dials lazily: Ping
// checks.
func NewRedis(cluster string, primary Config, replicas []Config) (*Redis, error) {
	if err := pathcomp.ValidateName(cluster); err != nil {
		return nil, fmt.Errorf("hopstore: cluster: %w", err)
	}
	p, err := primary.client()
	if err != nil {
		return nil, fmt.Errorf("hopstore: primary: %w", err)
	}
	r := &Redis{cluster: cluster, hops: keyPrefix + cluster + ":hops", ver: keyPrefix + cluster + ":ver",
		vers: keyPrefix + cluster + ":vers", primary: p, names: []string{"primary"}, timeout: Timeout}
	for i, c := range replicas {
		x, err := c.client()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("hopstore: replica %d: %w", i+1, err)
		}
		r.replicas = append(r.replicas, x)
		r.names = append(r.names, fmt.Sprintf("replica %d", i+1))
	}
	return r, nil
}

// Close implements Store.
func (r *Redis) Close() error {
	err := r.primary.Close()
	for _, x := range r.replicas {
		err = errors.Join(err, x.Close())
	}
	return err
}

// Ping implements Store: the primary answers PING (the replicas are not
// written; a pathd whose primary is gone cannot keep its figures).
func (r *Redis) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.primary.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("hopstore: cluster %s: redis ping: %w", r.cluster, err)
	}
	return nil
}

// saveScript writes rows and versions them, atomically: ARGV is FIELD ROW
// pairs; the rows take versions top-n+1..top.
var saveScript = redis.NewScript(`
local n = #ARGV / 2
local top = redis.call('INCRBY', KEYS[2], n)
for i = 1, n do
  local f = ARGV[2*i-1]
  redis.call('HSET', KEYS[1], f, ARGV[2*i])
  redis.call('ZADD', KEYS[3], top - n + i, f)
end
return top`)

// saveChunk bounds one script call's rows: a script blocks the server
// while it runs (1,024 rows: well under a millisecond).
const saveChunk = 1024

// Save implements Store: one pipeline of save scripts, saveChunk rows each.
func (r *Redis) Save(ctx context.Context, recs []pathcomp.HopRecord) error {
	if err := checkSave(recs); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	keys := []string{r.hops, r.ver, r.vers}
	c := r.primary
	// Load the script once (EVALSHA in a pipeline cannot fall back to EVAL).
	if err := saveScript.Load(ctx, c).Err(); err != nil {
		return fmt.Errorf("hopstore: cluster %s: save: %w", r.cluster, err)
	}
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for lo := 0; lo < len(recs); lo += saveChunk {
			chunk := recs[lo:min(lo+saveChunk, len(recs))]
			args := make([]any, 0, 2*len(chunk))
			for _, x := range chunk {
				args = append(args, field(x), encode(x))
			}
			saveScript.EvalSha(ctx, p, keys, args...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hopstore: cluster %s: save %d records: %w", r.cluster, len(recs), err)
	}
	return nil
}

// MaxRows bounds what Load reads: twice pathcomp's default MaxHops.
const MaxRows = 2 << 20

// Load implements Store: from the primary, or from the first replica that
// answers when the primary does not.
func (r *Redis) Load(ctx context.Context) (Loaded, error) {
	l, err := r.load(ctx, r.primary)
	if err == nil {
		l.From = r.names[0]
		return l, nil
	}
	errs := []error{fmt.Errorf("primary: %w", err)}
	for i, x := range r.replicas {
		l, e := r.load(ctx, x)
		if e == nil {
			l.From = r.names[i+1]
			return l, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.names[i+1], e))
	}
	return Loaded{}, fmt.Errorf("hopstore: cluster %s: load: %w", r.cluster, errors.Join(errs...))
}

func (r *Redis) load(ctx context.Context, c *redis.Client) (Loaded, error) {
	var l Loaded
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	v, err := c.Get(cctx, r.ver).Uint64()
	cancel()
	if err != nil && !errors.Is(err, redis.Nil) {
		return l, fmt.Errorf("%s: %w", r.ver, err)
	}
	l.Cursor = v
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		kv, next, err := c.HScan(cctx, r.hops, cursor, "", 1024).Result()
		cancel()
		if err != nil {
			return l, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if rec, err := decode(kv[i], kv[i+1]); err != nil {
				l.bad("%v", err)
			} else {
				l.Records = append(l.Records, rec)
			}
		}
		if len(l.Records)+l.Malformed > MaxRows {
			return l, fmt.Errorf("more than %d rows", MaxRows)
		}
		if cursor = next; cursor == 0 {
			return l, nil
		}
	}
}

// Changes implements Store: GET of the version (to notice a store that
// lost its data), ZRANGEBYSCORE on the versions, then HMGET of the rows.
func (r *Redis) Changes(ctx context.Context, since uint64, max int) (Loaded, error) {
	l := Loaded{Cursor: since}
	if max <= 0 {
		return l, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c := r.primary
	ver, err := c.Get(ctx, r.ver).Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return l, fmt.Errorf("hopstore: cluster %s: changes: %s: %w", r.cluster, r.ver, err)
	}
	if ver < since {
		since, l.Reset, l.Cursor = 0, true, 0
	}
	zs, err := c.ZRangeByScoreWithScores(ctx, r.vers, &redis.ZRangeBy{
		Min: "(" + strconv.FormatUint(since, 10), Max: "+inf", Count: int64(max)}).Result()
	if err != nil {
		return l, fmt.Errorf("hopstore: cluster %s: changes: %w", r.cluster, err)
	}
	if len(zs) == 0 {
		return l, nil
	}
	fields := make([]string, len(zs))
	for i, z := range zs {
		f, ok := z.Member.(string)
		if !ok || z.Score < 0 || z.Score > 1<<53 {
			l.bad("version row %v: not a field with a version", z.Member)
			continue
		}
		fields[i] = f
		if v := uint64(z.Score); v > l.Cursor {
			l.Cursor = v
		}
	}
	vals, err := c.HMGet(ctx, r.hops, fields...).Result()
	if err != nil {
		return l, fmt.Errorf("hopstore: cluster %s: changes: %w", r.cluster, err)
	}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok || fields[i] == "" {
			continue // deleted by Expire since
		}
		if rec, err := decode(fields[i], s); err != nil {
			l.bad("%v", err)
		} else {
			l.Records = append(l.Records, rec)
		}
	}
	l.More = len(zs) == max
	return l, nil
}

// expireScript deletes a row only if it is still the one the reader saw
// old: a row another server rewrote since stays.
var expireScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i+1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n`)

// Expire implements Store: HSCAN the rows, delete those last reported
// before before, and rows that do not parse (nobody can read them).
func (r *Redis) Expire(ctx context.Context, before time.Time) (int, error) {
	c := r.primary
	var cursor uint64
	total := 0
	for {
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		kv, next, err := c.HScan(cctx, r.hops, cursor, "", 1024).Result()
		if err != nil {
			cancel()
			return total, fmt.Errorf("hopstore: cluster %s: expire: %w", r.cluster, err)
		}
		var args []any
		for i := 0; i+1 < len(kv); i += 2 {
			rec, err := decode(kv[i], kv[i+1])
			if err != nil || rec.Last.Before(before) {
				args = append(args, kv[i], kv[i+1])
			}
		}
		if len(args) > 0 {
			n, err := expireScript.Run(cctx, c, []string{r.hops, r.vers}, args...).Int()
			if err != nil {
				cancel()
				return total, fmt.Errorf("hopstore: cluster %s: expire: %w", r.cluster, err)
			}
			total += n
		}
		cancel()
		if cursor = next; cursor == 0 {
			return total, nil
		}
	}
}

// Client is the primary's go-redis client (tests).
func (r *Redis) Client() *redis.Client { return r.primary }
