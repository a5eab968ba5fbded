package store

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/azgate/azgate/internal/model"
)

func TestPageSizer(t *testing.T) {
	p := pageSizer{budget: LoadPageBytes}
	if got := p.limit(); got != firstPage {
		t.Errorf("first page %d keys, want %d", got, firstPage)
	}
	small := pageSizer{budget: 1000}
	if got := small.limit(); got != 3 { // 1000 / 256
		t.Errorf("first page of a 1000-byte budget %d keys, want 3", got)
	}
	// 200-byte keys and values (224 with the overhead): the budget at
	// that size.
	kv := &mvccpb.KeyValue{Key: make([]byte, 50), Value: make([]byte, 150)}
	for range 10 {
		p.add(kv)
	}
	if got, want := p.limit(), int64(LoadPageBytes/(200+kvOverhead)); got != want {
		t.Errorf("page of 224-byte keys %d, want %d", got, want)
	}
	// Tiny keys: no more than loadPage a page (etcd's count per page).
	tiny := pageSizer{budget: LoadPageBytes}
	tiny.add(&mvccpb.KeyValue{Key: []byte("k")})
	if got := tiny.limit(); got != loadPage {
		t.Errorf("page of tiny keys %d, want %d", got, loadPage)
	}
	// A key larger than the budget: one a page.
	big := pageSizer{budget: 1000}
	big.add(&mvccpb.KeyValue{Key: []byte("k"), Value: make([]byte, 5000)})
	if got := big.limit(); got != 1 {
		t.Errorf("page of keys over the budget %d, want 1", got)
	}
}

// A full load in many pages reads one revision: writes that land between
// its pages are not in it.
func TestLoadPagesOneRevision(t *testing.T) {
	s := embedded(t)
	ctx := context.Background()
	objs := eips(250)
	rev, err := s.Commit(ctx, 0, put(t, objs...))
	if err != nil {
		t.Fatal(err)
	}
	s.loadPageBytes = 2048
	var pages []int
	var wrote int64
	s.onPage = func(keys int) {
		if keys > 0 {
			pages = append(pages, keys)
		}
		if len(pages) != 1 || wrote != 0 {
			return
		}
		// After the first page: change an EIP and delete another, both
		// in later pages.
		e := *objs[199].(*model.EIP)
		e.Description = "changed"
		ops := put(t, &e)
		ops = append(ops, Op{Kind: model.KindEIP, Key: objs[249].Key()})
		r, err := s.Commit(ctx, rev, ops)
		if err != nil {
			t.Error(err)
		}
		wrote = r
	}
	st, loaded, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wrote <= loaded {
		t.Errorf("the load's revision %d is not before the write in its middle (%d)", loaded, wrote)
	}
	if st.Len(model.KindEIP) != 250 || st.EIPs[objs[199].Key()].Description != "199" {
		t.Errorf("loaded %d EIPs, EIP %s %q: the write between pages leaked into the load", st.Len(model.KindEIP), objs[199].Key(), st.EIPs[objs[199].Key()].Description)
	}
	// Pages of about 2 kB: the first of 2048/256 = 8 keys, the others
	// as many as fit at the mean size so far; the EIP range alone (each
	// key and value well over 50 bytes) takes more than 250*50/2048.
	for _, n := range pages {
		if n > 2048/50 {
			t.Errorf("a page of %d keys, over a 2 kB budget", n)
		}
	}
	if pages[0] > 8 || len(pages) < 250*50/2048 {
		t.Errorf("pages %v: want a first of at most 8 keys and more than %d", pages, 250*50/2048)
	}
	// The next load sees the write.
	st, _, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Len(model.KindEIP) != 249 || st.EIPs[objs[199].Key()].Description != "changed" {
		t.Errorf("reloaded %d EIPs, %q", st.Len(model.KindEIP), st.EIPs[objs[199].Key()].Description)
	}
}
