package store

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Announcements are read back, watched (a new key, a malformed one, a
// lease that is revoked) and malformed entries reported, not returned.
func TestAnnouncements(t *testing.T) {
	s := embedded(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write := func(lease LeaseID, an model.Announcement) {
		t.Helper()
		b, _ := json.Marshal(an)
		if err := s.WriteLeased(ctx, lease, []KV{{Key: AnnounceKey(an.Set, an.Edge), Value: b}}); err != nil {
			t.Fatal(err)
		}
	}
	l1, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a1 := model.Announcement{Set: "pop-a", Edge: "edge-a1", Underlay: netip.MustParseAddr("198.18.0.1"),
		Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, Since: time.Now().UTC().Truncate(time.Second)}
	write(l1, a1)
	if _, err := s.Client.Put(ctx, AnnounceRoot+"pop-a/edge-x", `{"set":"pop-b","edge":"edge-x"}`); err != nil {
		t.Fatal(err)
	}
	es, _, err := Announcements(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Err != nil || es[0].Announcement.Underlay != a1.Underlay || !es[0].Announcement.Since.Equal(a1.Since) ||
		es[1].Err == nil {
		t.Fatalf("announcements: %+v", es)
	}

	got := make(chan map[string]model.Announcement, 10)
	bad := make(chan AnnounceEntry, 10)
	done := make(chan error, 1)
	go func() {
		done <- WatchAnnouncements(ctx, s, func(m map[string]model.Announcement) { got <- m }, func(e AnnounceEntry) { bad <- e })
	}()
	next := func(n int) map[string]model.Announcement {
		t.Helper()
		select {
		case m := <-got:
			if len(m) != n {
				t.Fatalf("watched %d announcements, want %d: %v", len(m), n, m)
			}
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no announcement update")
		}
		return nil
	}
	next(1)
	if e := <-bad; e.Key != AnnounceRoot+"pop-a/edge-x" {
		t.Fatalf("bad entry: %+v", e)
	}
	l2, err := s.Grant(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	write(l2, model.Announcement{Set: "pop-a", Edge: "edge-a2", Underlay: netip.MustParseAddr("198.18.0.2")})
	if m := next(2); m[AnnounceKey("pop-a", "edge-a2")].Underlay != netip.MustParseAddr("198.18.0.2") {
		t.Fatalf("watched: %v", m)
	}
	// The edge withdrew (or died): its lease goes, and its key with it.
	if err := s.Revoke(ctx, l1); err != nil {
		t.Fatal(err)
	}
	if m := next(1); len(m) != 1 || m[AnnounceKey("pop-a", "edge-a2")].Edge != "edge-a2" {
		t.Fatalf("after revoke: %v", m)
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("watch ended with %v", err)
	}
}
