package store

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// AnnounceRoot is where each edge keeps a leased key while it announces
// its set's routes with BGP (issue 8): AnnounceRoot + SET + "/" + EDGE,
// TTL about 2 s, so the key vanishes within that when the edge stops
// announcing, dies or loses the store. The agents read these keys to know
// which members of a set are live (docs/roles.md, "Agent").
const AnnounceRoot = "/azgate/announce/"

// Announcement is the value of an announce key.
type Announcement struct {
	Set      string         `json:"set"`
	Edge     string         `json:"edge"`
	Underlay netip.Addr     `json:"underlay"`
	Prefixes []netip.Prefix `json:"prefixes"`
}

// AnnounceKey is the key edge of set keeps while it announces.
func AnnounceKey(set, edge string) string { return AnnounceRoot + set + "/" + edge }

// ParseAnnounce reads one announce key and value: the key must be
// AnnounceRoot/SET/EDGE and the value's set and edge must be the key's.
func ParseAnnounce(key string, value []byte) (Announcement, error) {
	rest, ok := strings.CutPrefix(key, AnnounceRoot)
	set, edge, ok2 := strings.Cut(rest, "/")
	if !ok || !ok2 || set == "" || edge == "" || strings.Contains(edge, "/") {
		return Announcement{}, fmt.Errorf("%s: not a %sSET/EDGE key", key, AnnounceRoot)
	}
	if len(value) > 64<<10 {
		return Announcement{}, fmt.Errorf("%s: value of %d bytes", key, len(value))
	}
	var a Announcement
	if err := json.Unmarshal(value, &a); err != nil {
		return Announcement{}, fmt.Errorf("%s: %w", key, err)
	}
	if a.Set != set || a.Edge != edge {
		return Announcement{}, fmt.Errorf("%s: the value names set %q edge %q", key, a.Set, a.Edge)
	}
	return a, nil
}

// Announcements is every announce key read, by set and edge, and how many
// keys were malformed (skipped).
type Announcements struct {
	BySet map[string]map[string]Announcement
	Bad   int
}

// Announcing reports whether edge of set has its announce key.
func (a Announcements) Announcing(set, edge string) bool {
	_, ok := a.BySet[set][edge]
	return ok
}

func (a Announcements) clone() Announcements {
	out := Announcements{BySet: make(map[string]map[string]Announcement, len(a.BySet)), Bad: a.Bad}
	for s, es := range a.BySet {
		m := make(map[string]Announcement, len(es))
		for e, v := range es {
			m[e] = v
		}
		out.BySet[s] = m
	}
	return out
}

// WatchAnnouncements hands h every announcement after each change: a full
// read first, then one call per watch response (a key deleted or expired
// is gone from the next call), until ctx ends. A broken or compacted
// watch reads everything again. Malformed keys are skipped, logged and
// counted (Bad). h runs on the watching goroutine: it must not block.
func WatchAnnouncements(ctx context.Context, r PrefixReader, log *slog.Logger, h func(Announcements)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		kvs, rev, err := r.GetPrefix(ctx, AnnounceRoot)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("reading announcements failed; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		cur := Announcements{BySet: map[string]map[string]Announcement{}}
		bad := map[string]bool{}
		put := func(k string, v []byte) {
			if set, edge, ok := strings.Cut(strings.TrimPrefix(k, AnnounceRoot), "/"); ok {
				delete(cur.BySet[set], edge)
			}
			a, err := ParseAnnounce(k, v)
			if err != nil {
				if !bad[k] {
					log.Warn("malformed announce key skipped", "err", err)
				}
				bad[k] = true
				cur.Bad = len(bad)
				return
			}
			delete(bad, k)
			cur.Bad = len(bad)
			if cur.BySet[a.Set] == nil {
				cur.BySet[a.Set] = map[string]Announcement{}
			}
			cur.BySet[a.Set][a.Edge] = a
		}
		for _, kv := range kvs {
			put(kv.Key, kv.Value)
		}
		h(cur.clone())
		err = r.WatchPrefix(ctx, AnnounceRoot, rev+1, func(cs []Change) {
			for _, c := range cs {
				if c.Delete {
					delete(bad, c.Key)
					cur.Bad = len(bad)
					if set, edge, ok := strings.Cut(strings.TrimPrefix(c.Key, AnnounceRoot), "/"); ok {
						delete(cur.BySet[set], edge)
					}
					continue
				}
				put(c.Key, c.Value)
			}
			h(cur.clone())
		})
		if ctx.Err() != nil {
			return
		}
		log.Warn("announcement watch ended; reading every announcement again", "err", err)
	}
}
