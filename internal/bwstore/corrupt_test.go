package bwstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRedisReadsBackOnlyWhatWritersWrite fills a real redis-server with
// what no writer of this package can leave (a corrupt or hostile store)
// and checks the readers: ReadReports leaves each such report out, naming
// it in Snapshot.Malformed, and still returns the good ones (one bad entry
// does not blind the manager to the AZ); ReadLimits and LimitsGeneration
// refuse a host's corrupt limits with an error naming the host and what is
// wrong, never handing a host a limit it would enforce wrongly.
func TestRedisReadsBackOnlyWhatWritersWrite(t *testing.T) {
	srv := startRedis(t)
	r, err := NewRedis(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	c := r.Client()
	good := []Rate{{EIP: ip("198.51.100.1"), Dir: Egress, BytesPerSec: 5}, {EIP: ip("198.51.100.2"), Dir: Ingress, BytesPerSec: 6}}
	must(t, r.WriteReports(ctx, "az1", "good", time.Minute, good))
	must(t, r.WriteReports(ctx, "az1", "zgood", time.Minute, good[:1]))

	// Each bad reporter: its hash (with _ttl 60000 unless given), then
	// how to expire it.
	type rep struct {
		name, why string
		fields    []string
		pexpire   time.Duration // 0: PERSIST (no expiry)
	}
	ok := "198.51.100.3/e"
	for _, b := range []rep{
		{"mapped", "not as written", []string{"::ffff:198.51.100.1/e", "1 1 1"}, time.Minute},
		{"zone", "not as written", []string{"fe80::1%eth0/e", "1 1 1"}, time.Minute},
		{"uppercase6", "not as written", []string{"2001:DB8::1/e", "1 1 1"}, time.Minute},
		{"leadingzero", "not as written", []string{"2001:db8:0::1/i", "1 1 1"}, time.Minute},
		{"direction", "direction", []string{"198.51.100.1/x", "1 1 1"}, time.Minute},
		{"nodir", "no direction", []string{"198.51.100.1", "1 1 1"}, time.Minute},
		{"two", "want 3 numbers", []string{ok, "1 2"}, time.Minute},
		{"four", "want 3 numbers", []string{ok, "1 2 3 4"}, time.Minute},
		{"negative", "not 3 decimal", []string{ok, "-1 2 3"}, time.Minute},
		{"overflow", "not 3 decimal", []string{ok, "18446744073709551616 0 0"}, time.Minute},
		{"nottl", "_ttl", []string{ok, "1 1 1", "_ttl", ""}, time.Minute},
		{"ttl0", "_ttl", []string{ok, "1 1 1", "_ttl", "0"}, time.Minute},
		{"ttlhuge", "_ttl", []string{ok, "1 1 1", "_ttl", "99999999999999999999"}, time.Minute},
		{"expirymoved", "after its TTL", []string{ok, "1 1 1", "_ttl", "1000"}, time.Minute},
		{"persist", "no expiry", []string{ok, "1 1 1"}, 0},
	} {
		f := b.fields
		if !strings.Contains(strings.Join(f, " "), "_ttl") {
			f = append(f, "_ttl", "60000")
		}
		args := make([]any, len(f))
		for i, x := range f {
			args[i] = x
		}
		must(t, c.HSet(ctx, repKey("az1", b.name), args...).Err())
		if b.pexpire > 0 {
			must(t, c.PExpire(ctx, repKey("az1", b.name), b.pexpire).Err())
		}
		must(t, c.SAdd(ctx, reportersKey("az1"), b.name).Err())
		t.Run(b.name, func(t *testing.T) {
			snap, err := r.ReadReports(ctx, "az1")
			if err != nil {
				t.Fatalf("one bad report failed the whole read: %v", err)
			}
			if len(snap.Reports) != 3 || snap.Reports[0].Reporter != "good" || snap.Reports[2].Reporter != "zgood" {
				t.Errorf("reports %+v, want good's two and zgood's one", snap.Reports)
			}
			if len(snap.Malformed) != 1 || !strings.HasPrefix(snap.Malformed[0], b.name+": ") || !strings.Contains(snap.Malformed[0], b.why) {
				t.Errorf("malformed %q, want one %q saying %q", snap.Malformed, b.name, b.why)
			}
		})
		must(t, c.Del(ctx, repKey("az1", b.name)).Err()) // pruned from the index by the next read
	}
	// A key of another type and a member that is not a reporter name.
	must(t, c.Set(ctx, repKey("az1", "str"), "x", 0).Err())
	must(t, c.SAdd(ctx, reportersKey("az1"), "str", "bad:name").Err())
	snap, err := r.ReadReports(ctx, "az1")
	must(t, err)
	if len(snap.Reports) != 3 || len(snap.Malformed) != 2 ||
		!strings.Contains(snap.Malformed[0], `"bad:name": not a reporter name`) || !strings.Contains(snap.Malformed[1], "str: WRONGTYPE") {
		t.Errorf("reports %d (want 3), malformed %q", len(snap.Reports), snap.Malformed)
	}

	// Limits: a good host, then one corrupt host each.
	must(t, r.WriteLimits(ctx, "az1", "hgood", time.Minute, Limits{Generation: 3, Limits: []Limit{{EIP: ip("198.51.100.1"), Dir: Egress, RateBytes: 10, BurstBytes: 20}}}))
	for _, b := range []rep{
		{"gen0", "_gen", []string{"_gen", "0"}, time.Minute},
		{"gen53", "_gen", []string{"_gen", "9007199254740992"}, time.Minute},
		{"issued", "_issued", []string{"_issued", "soon"}, time.Minute},
		{"rate", "at most", []string{ok, "1125899906842625 1"}, time.Minute},
		{"burst", "at most", []string{ok, "1 72057594037927937"}, time.Minute},
		{"mapped", "not as written", []string{"::ffff:198.51.100.1/e", "1 1"}, time.Minute},
		{"three", "want 2 numbers", []string{ok, "1 1 1"}, time.Minute},
		{"persist", "no expiry", nil, 0},
		{"expirymoved", "after its TTL", []string{"_ttl", "1000"}, time.Minute},
	} {
		h := map[string]string{"_gen": "7", "_ttl": "60000", "_issued": "1800000000000"}
		for i := 0; i+1 < len(b.fields); i += 2 {
			h[b.fields[i]] = b.fields[i+1]
		}
		must(t, c.HSet(ctx, limKey("az1", b.name), h).Err())
		if b.pexpire > 0 {
			must(t, c.PExpire(ctx, limKey("az1", b.name), b.pexpire).Err())
		}
		_, got, err := r.ReadLimits(ctx, "az1", b.name)
		if err == nil || got || !strings.Contains(err.Error(), "limits of "+b.name+" in az1") || !strings.Contains(err.Error(), b.why) {
			t.Errorf("limits %s: ok=%v err=%v, want an error naming the host and %q", b.name, got, err, b.why)
		}
	}
	for _, host := range []string{"gen0", "gen53"} {
		if _, got, err := r.LimitsGeneration(ctx, "az1", host); err == nil || got || !strings.Contains(err.Error(), "_gen") {
			t.Errorf("generation of %s: ok=%v err=%v", host, got, err)
		}
	}
	must(t, c.Set(ctx, limKey("az1", "str"), "x", 0).Err())
	if _, _, err := r.ReadLimits(ctx, "az1", "str"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("limits of a string key: %v", err)
	}
	// A corrupt fence: an error, neither a silent success nor a stale
	// refusal (which a manager takes for a newer manager), and nothing
	// written.
	for i, fence := range []string{"1e300", "abc", "9007199254740992", "-5", "0x10", "0"} {
		host := "fence" + strconv.Itoa(i)
		must(t, c.Set(ctx, genKey("az1", host), fence, 0).Err())
		err := r.WriteLimits(ctx, "az1", host, time.Minute, Limits{Generation: 5})
		if err == nil || errors.Is(err, ErrStaleGeneration) || !strings.Contains(err.Error(), "not a generation") {
			t.Errorf("fence %q: %v, want an error saying it is not a generation", fence, err)
		}
		if n, _ := c.Exists(ctx, limKey("az1", host)).Result(); n != 0 {
			t.Errorf("fence %q: limits written", fence)
		}
	}
	hl, got, err := r.ReadLimits(ctx, "az1", "hgood")
	if err != nil || !got || hl.Generation != 3 || len(hl.Limits.Limits) != 1 {
		t.Errorf("good host's limits: %+v ok=%v err=%v", hl, got, err)
	}
}
