package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/model"
)

// ListOptions page and filter a list.
type ListOptions struct {
	// Limit: at most this many objects (0: all); Continue: the objects
	// after this key (the page's last key, api.List.Continue), in the
	// list's order (addresses in address order, names in string order).
	Limit    int
	Continue string
	// EIP filters EIPs (kind eips only).
	EIP EIPFilter
}

// EIPFilter selects EIPs: each field set must match.
type EIPFilter struct {
	// Set: served by this edge set (pulled out into it, or covered by
	// its prefixes and not pulled out).
	Set string `json:"set,omitempty"`
	// Host: bound to a guest of this host.
	Host string `json:"host,omitempty"`
	// Prefix: the address is inside it.
	Prefix netip.Prefix `json:"prefix,omitzero"`
}

func (f EIPFilter) empty() bool { return f.Set == "" && f.Host == "" && !f.Prefix.IsValid() }

func (f EIPFilter) match(st *model.State, e *model.EIP) bool {
	if f.Host != "" && (e.Binding == nil || e.Binding.Host != f.Host) {
		return false
	}
	if f.Prefix.IsValid() && !f.Prefix.Contains(e.Address) {
		return false
	}
	if f.Set != "" {
		if e.Set != "" {
			return e.Set == f.Set
		}
		set, ok := st.EdgeSets[f.Set]
		return ok && set.Role == "" && set.Contains(e.Address)
	}
	return true
}

// after reports whether key comes after token in kind's list order.
func after(kind, key, token string) bool {
	if kind == model.KindEIP || kind == model.KindQuarantine {
		a, err1 := netip.ParseAddr(key)
		b, err2 := netip.ParseAddr(token)
		if err1 == nil && err2 == nil {
			return b.Less(a)
		}
	}
	return key > token
}

// DefaultMaxListPage is Config.MaxListPage's default: the most objects one
// list answer holds (a page of EIPs is about 1.5 MB of JSON).
const DefaultMaxListPage = 10_000

// ListPage is List with paging and filters: the objects, the view's
// revision and, when more follow, the key to continue after. A limit of 0
// or above Config.MaxListPage is Config.MaxListPage.
func (c *Core) ListPage(kind string, o ListOptions) (items []model.Object, rev int64, next string, err error) {
	if m := c.cfg.MaxListPage; m > 0 && (o.Limit == 0 || o.Limit > m) {
		o.Limit = m
	}
	if !o.EIP.empty() && kind != model.KindEIP {
		return nil, 0, "", &InvalidError{Msg: fmt.Sprintf("the set, host and prefix filters are for eips, not %s", kind)}
	}
	if o.Continue != "" && (kind == model.KindEIP || kind == model.KindQuarantine) {
		// Their lists are in address order: another token would pick
		// a page silently wrong.
		if _, err := netip.ParseAddr(o.Continue); err != nil {
			return nil, 0, "", model.FieldError{Field: "continue", Msg: fmt.Sprintf("%q is not an address: send the continue of the page before", o.Continue)}
		}
	}
	v := c.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	keys := v.st.Keys(kind)
	start := 0
	if o.Continue != "" {
		start = sort.Search(len(keys), func(i int) bool { return after(kind, keys[i], o.Continue) })
	}
	items = []model.Object{}
	for _, k := range keys[start:] {
		obj, _ := v.st.Get(kind, k)
		if e, ok := obj.(*model.EIP); ok && !o.EIP.match(v.st, e) {
			continue
		}
		if o.Limit > 0 && len(items) == o.Limit {
			next = items[len(items)-1].Key()
			break
		}
		items = append(items, obj)
	}
	return items, v.rev, next, nil
}

// maxDeleteUnforced: a selector deleting more EIPs is refused without
// force.
const maxDeleteUnforced = 100

// maxDeleteErrors bounds the per-EIP errors a refused DeleteEIPs answers
// with: the first ones, and how many more there were.
const maxDeleteErrors = 20

// DeleteEIPs deletes every EIP the filter selects (at least one field
// set), all or nothing in one commit.
func (c *Core) DeleteEIPs(ctx context.Context, f EIPFilter) (api.ApplyResult, error) {
	if f.empty() {
		return api.ApplyResult{}, &InvalidError{Msg: "no selector: give a set, a host or a prefix (deleting every EIP is not a selection)",
			Fields: []model.FieldError{{Field: "set", Msg: "one of set, host, prefix is required"}}}
	}
	var objs []api.AppliedObject
	rev, warns, err := c.writeW(ctx, func(t *txn) error {
		objs = nil
		var es model.Errors
		failed := 0
		for _, k := range t.st.Keys(model.KindEIP) {
			if !f.match(t.st, t.st.EIPs[k]) {
				continue
			}
			if err := t.delete(model.KindEIP, k); err != nil {
				if failed++; len(es) < maxDeleteErrors {
					es = append(es, model.FieldError{Field: k, Msg: err.Error()})
				}
				continue
			}
			objs = append(objs, api.AppliedObject{Kind: model.KindEIP, Key: k, Action: api.Deleted})
		}
		if failed > 0 {
			msg := fmt.Sprintf("nothing was deleted: %d of the selected EIPs cannot be deleted: %s", failed, summary(es))
			if failed > len(es) {
				msg += fmt.Sprintf(" (the first %d listed; %d more not listed)", len(es), failed-len(es))
			}
			return &InvalidError{Fields: es, Msg: msg}
		}
		if len(objs) > maxDeleteUnforced {
			t.refuse("the selection deletes %d EIPs, more than %d", len(objs), maxDeleteUnforced)
		}
		return nil
	})
	dry := errors.Is(err, errDryRun)
	if err != nil && !dry {
		return api.ApplyResult{}, err
	}
	if objs == nil {
		objs = []api.AppliedObject{}
	}
	if !dry && len(objs) > 0 {
		c.log.Info("deleted EIPs by selector", "deleted", len(objs), "rev", rev)
	}
	return api.ApplyResult{Revision: rev, Deleted: len(objs), Objects: objs, Warnings: warns, DryRun: dry, Refusals: refusalsOf(err)}, nil
}
