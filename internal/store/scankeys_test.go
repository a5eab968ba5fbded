package store

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// parseScopeKeySplit is ParseScopeKey as it was before it cut
// substrings (strings.SplitN).
func parseScopeKeySplit(k string) (scope, kind, key string, ok bool) {
	rest, ok := strings.CutPrefix(k, ScopeRoot)
	if !ok {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" || parts[3] == "" {
		return "", "", "", false
	}
	return parts[0] + "/" + parts[1], parts[2], parts[3], true
}

// ParseScopeKey accepts and splits the keys the SplitN version did, and
// refuses the same ones: the listed ones and every key of up to 6
// segments of "", "a", "/" and "b/" after ScopeRoot.
func TestParseScopeKeyAsSplit(t *testing.T) {
	keys := []string{"", "/", ScopeRoot, ScopeRoot[:len(ScopeRoot)-1], "/azgate/scopes/set/a/eips/k",
		ScopeRoot + "set/a/eips/198.51.100.1", ScopeRoot + "set/a/guests/h1/g1", ScopeRoot + "set/a/eips/",
		ScopeRoot + "set/a/eips", ScopeRoot + "set//eips/k", ScopeRoot + "/a/eips/k", ScopeRoot + "set/a//k",
		ScopeRoot + "set/a/eips//", ScopeRoot + "set/a/eips/k/", ScopeRoot + "set/a/eips/\xff", "x" + ScopeRoot + "set/a/eips/k"}
	segs := []string{"", "a", "/", "b/"}
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		keys = append(keys, prefix)
		if n == 0 {
			return
		}
		for _, s := range segs {
			gen(prefix+s, n-1)
		}
	}
	gen(ScopeRoot, 6)
	for _, k := range keys {
		s1, k1, key1, ok1 := ParseScopeKey(k)
		s2, k2, key2, ok2 := parseScopeKeySplit(k)
		if s1 != s2 || k1 != k2 || key1 != key2 || ok1 != ok2 {
			t.Errorf("ParseScopeKey(%q) = %q %q %q %v, the SplitN version %q %q %q %v", k, s1, k1, key1, ok1, s2, k2, key2, ok2)
		}
	}
}

// scanParts hands over the keys one range of the prefix holds, once
// each and in key order, whatever the keys and the parts (parts that
// are prefixes of others, keys between and around them, 0xff and 0x00
// bytes, the prefix itself as a key), at every page budget.
func TestScanPartsIsOneRange(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	const prefix = "/azgate/test/p/"
	alpha := []string{"a", "ab", "eip", "eips", "/", "0", ".", "\xff", "\x00", "z"}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(4) {
			b.WriteString(alpha[rng.IntN(len(alpha))])
		}
		return b.String()
	}
	keys := []string{prefix, prefix + "\xff", prefix + "\xff\xff", prefix + "eips", prefix + "eips/", prefix + "eips0"}
	for range 300 {
		keys = append(keys, prefix+word())
	}
	for _, k := range keys {
		if _, err := s.Client.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the prefix, either side.
	for _, k := range []string{"/azgate/test/p", "/azgate/test/p0", "/azgate/test/p.\xff"} {
		if _, err := s.Client.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := s.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	var want []string
	for _, kv := range resp.Kvs {
		want = append(want, string(kv.Key))
	}
	partSets := [][]string{
		nil,
		{prefix + "eip/", prefix + "eips/", prefix + "a/"},
		{prefix + "eip", prefix + "eips", prefix + "eips/", prefix + "e", prefix + "\xff", prefix + "\xff\xff"},
		{prefix, prefix + "a", prefix + "a", "/azgate/other/", prefix + "z/"},
	}
	for range 20 {
		var ps []string
		for range 1 + rng.IntN(6) {
			ps = append(ps, prefix+word())
		}
		partSets = append(partSets, ps)
	}
	for _, budget := range []int{0, 1, 200, 4096} {
		for _, parts := range partSets {
			st := sharing(s, quiet)
			st.loadPageBytes = budget
			var got []string
			if err := st.scanParts(ctx, prefix, parts, rev, func(kv *mvccpb.KeyValue) { got = append(got, string(kv.Key)) }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("budget %d, parts %q: %d keys, want the range's %d\ngot  %q\nwant %q", budget, parts, len(got), len(want), got, want)
			}
		}
	}
}
