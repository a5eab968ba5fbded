package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/azgate/azgate/internal/model"
)

// AnnounceRoot holds one key per edge that announces its set's routes,
// AnnounceKey(set, edge), written with a short lease: it vanishes within
// the lease TTL of the edge's death, or at once when the edge withdraws.
const AnnounceRoot = "/azgate/announce/"

// AnnounceKey is where an announcing edge keeps its model.Announcement.
func AnnounceKey(set, edge string) string { return AnnounceRoot + set + "/" + edge }

// AnnounceEntry is one announcement read back, or why it could not be.
type AnnounceEntry struct {
	Key          string
	Announcement model.Announcement
	Err          error // malformed key or value
}

// Announcements reads every announcement, sorted by key (set, then edge),
// and the revision they were read at (to watch from).
func Announcements(ctx context.Context, s PrefixReader) ([]AnnounceEntry, int64, error) {
	kvs, rev, err := s.GetPrefix(ctx, AnnounceRoot)
	if err != nil {
		return nil, 0, fmt.Errorf("store: reading announcements: %w", err)
	}
	out := make([]AnnounceEntry, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, decodeAnnouncement(kv.Key, kv.Value))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, rev, nil
}

func decodeAnnouncement(key string, value []byte) AnnounceEntry {
	e := AnnounceEntry{Key: key}
	set, edge, ok := strings.Cut(strings.TrimPrefix(key, AnnounceRoot), "/")
	if !ok || set == "" || edge == "" || strings.Contains(edge, "/") {
		e.Err = fmt.Errorf("%s: not a SET/EDGE announce key", key)
		return e
	}
	if err := json.Unmarshal(value, &e.Announcement); err != nil {
		e.Err = fmt.Errorf("%s: %w", key, err)
		return e
	}
	if e.Announcement.Set != set || e.Announcement.Edge != edge {
		e.Err = fmt.Errorf("%s: names set %q edge %q, not its key's", key, e.Announcement.Set, e.Announcement.Edge)
	}
	return e
}

// WatchAnnouncements calls fn with every announcement (valid ones, by
// key; a copy fn may keep) at once and again after each change, until
// ctx ends or the store fails (the error says why). A compacted history
// is read again. fn runs on the caller's goroutine; malformed entries go
// to bad (may be nil).
func WatchAnnouncements(ctx context.Context, s PrefixReader, fn func(map[string]model.Announcement), bad func(AnnounceEntry)) error {
	for {
		es, rev, err := Announcements(ctx, s)
		if err != nil {
			return err
		}
		cur := map[string]model.Announcement{}
		for _, e := range es {
			if e.Err != nil {
				if bad != nil {
					bad(e)
				}
				continue
			}
			cur[e.Key] = e.Announcement
		}
		fn(maps.Clone(cur))
		err = s.WatchPrefix(ctx, AnnounceRoot, rev+1, func(cs []Change) {
			for _, c := range cs {
				if c.Delete {
					delete(cur, c.Key)
					continue
				}
				e := decodeAnnouncement(c.Key, c.Value)
				if e.Err != nil {
					delete(cur, c.Key)
					if bad != nil {
						bad(e)
					}
					continue
				}
				cur[c.Key] = e.Announcement
			}
			fn(maps.Clone(cur))
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, ErrCompacted) {
			return err
		}
	}
}
