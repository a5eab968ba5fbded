/* lb.h: the edge's L4 load balancer: listeners (VIP, protocol, port or any
 * port), Maglev tables swapped in whole through a map of maps, a shared
 * LRU connection table for per-connection consistency (PCC), NAT mode
 * (DNAT in, SNAT back) and ICMP errors steered to the backend owning the
 * flow. Its maps are in maps.h. */
#ifndef AZG_LB_H
#define AZG_LB_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "csum.h"
#include "parse.h"
#include "hash.h"
#include "stats.h"
#include "nvgre.h"
#include "fib.h"
#include "nat.h"



static __always_inline void info_inc(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&lb_info, &i);
	if (v)
		(*v)++;
}

static __always_inline void lb_count(void *map, __u32 idx, __u64 bytes, int conn)
{
	struct lb_counters *c = bpf_map_lookup_elem(map, &idx);
	if (c) {
		c->packets++;
		c->bytes += bytes;
		c->conns += conn;
	}
}

static __always_inline __u32 ct_timeout(const struct lb_config *c, __u8 state)
{
	switch (state) {
	case CT_SYN:
		return c->to_syn;
	case CT_EST:
		return c->to_est;
	case CT_FIN:
		return c->to_fin;
	}
	return c->to_udp;
}

/* State after seeing tcp flags in state s (UDP and others stay CT_UDP). */
static __always_inline __u8 ct_next(__u8 s, __u8 proto, __u8 flags)
{
	if (proto != IPPROTO_TCP_)
		return CT_UDP;
	if (flags & (TCP_FIN_ | TCP_RST_))
		return CT_FIN;
	if (s == CT_SYN && (flags & TCP_ACK_))
		return CT_EST;
	return s ? s : CT_SYN;
}

static __always_inline int ct_insert_allowed(const struct lb_config *c, __u32 now)
{
	if (!c->insert_rate)
		return 1;
	__u32 zero = 0;
	struct ct_bucket *b = bpf_map_lookup_elem(&ct_buckets, &zero);
	if (!b)
		return 1;
	__u64 hz = c->hz ? c->hz : 250;
	__u64 elapsed = (__u32)(now - (__u32)b->last);
	if (elapsed > 10 * hz)
		elapsed = 10 * hz;
	/* tokens are scaled by hz: one insert costs hz */
	__u64 t = b->tokens + elapsed * c->insert_rate;
	__u64 cap = (__u64)(c->insert_burst ? c->insert_burst : c->insert_rate) * hz;
	if (t > cap)
		t = cap;
	b->last = now;
	if (t < hz) {
		b->tokens = t;
		return 0;
	}
	b->tokens = t - hz;
	return 1;
}

/* Connection sync: tells the edge's peers about an entry made (k, e; kind
 * CT_EV_NEW) or whose TCP state changed (CT_EV_STATE), as a ct_event in
 * ct_events read by internal/connsync. Called only then, never on a plain
 * hit, and only while sync runs (ct_sync_on). A global (separately
 * verified) function: inlined, its helper calls made lb_ingress spill one
 * more register, and lb_ingress's frame may not grow (xdp_edge, lb_ingress
 * and the 32 bytes the verifier counts for any frame below them take the
 * 512 bytes). The record is built in ring memory, not on the stack; it
 * reads the key and the entry after the reserve, so nothing is kept
 * across the call. A full ring drops the event and counts it
 * (ct_events_lost, maps.h): the peers' copy of that entry waits for the
 * periodic refresh (docs/connsync.md). */
__noinline int ct_emit(const struct ct_key *k, const struct ct_entry *e, __u32 kind)
{
	if (!k || !e)
		return 0;
	struct ct_event *ev = bpf_ringbuf_reserve(&ct_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&ct_events_lost, 1);
		return 0;
	}
	ev->key = *k;
	ev->backend = e->backend;
	ev->gen = e->gen;
	ev->last = e->last;
	ev->state = e->state;
	ev->fid = e->fid;
	ev->kind = kind;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* Keeps struct ct_event in the object's BTF for bpf2go (the program only
 * builds it in ring memory). */
const struct ct_event ct_event_btf __attribute__((unused));

/* ct_emit for an IPv6 VIP's entry (lb_conns6): a struct ct_event6 in the
 * same ring (the reader tells it by its length), the same rules. A global
 * function of its own, so the IPv4 path's code is unchanged. */
__noinline int ct_emit6(const struct ct_key6 *k, const struct ct_entry *e, __u32 kind)
{
	if (!k || !e)
		return 0;
	struct ct_event6 *ev = bpf_ringbuf_reserve(&ct_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&ct_events_lost, 1);
		return 0;
	}
	ev->key = *k;
	ev->backend = e->backend;
	ev->gen = e->gen;
	ev->last = e->last;
	ev->state = e->state;
	ev->fid = e->fid;
	ev->kind = kind;
	ev->pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

const struct ct_event6 ct_event6_btf __attribute__((unused));

/* The flow the load balancer decides on (client -> VIP). */
struct lb_flow {
	__be32 client;
	__be32 vip;
	__be16 cport;
	__be16 vport;
	__u8 proto;
	__u8 tcp_flags;
	__u8 icmp;     /* an ICMP error about the flow, found through its quote */
	__u8 pad;
	__u32 hash;
};

/* The range of rs holding port hp (host order): its index, or -1. A
 * binary search bounded by LB_RANGES_MAX; a global (separately verified)
 * function, so its loop is verified once and not at every call site. */
__noinline int lb_range_find(const struct lb_ranges *rs, __u32 hp)
{
	if (!rs)
		return -1;
	__u32 lo = 0, hi = rs->n; /* the range holding hp, if any, is in [lo, hi) */
	if (hi > LB_RANGES_MAX)
		hi = LB_RANGES_MAX;
	for (int i = 0; i < __builtin_ctz(LB_RANGES_MAX) + 1 && lo < hi; i++) {
		__u32 mid = ((lo + hi) / 2) & (LB_RANGES_MAX - 1);
		const struct lb_range *r = &rs->r[mid];
		if (hp < r->lo)
			hi = mid;
		else if (hp > r->hi)
			lo = mid + 1;
		else
			return mid;
	}
	return -1;
}

/* Finds the listener for a flow: the exact port first (one lookup: the
 * common case costs what it did), then the (VIP, protocol)'s ranges, then
 * its any-port listener. Port 0 (later fragments) only matches any-port
 * listeners. */
static __always_inline struct lb_listener *lb_listener_for(__be32 vip, __u8 proto, __be16 port)
{
	struct lb_key k = {.vip = vip, .port = port, .proto = proto};
	struct lb_listener *l = bpf_map_lookup_elem(&lb_listeners, &k);
	if (l)
		return l;
	struct lb_rkey rk = {.vip = vip, .proto = proto};
	struct lb_ranges *rs = bpf_map_lookup_elem(&lb_ranges, &rk);
	if (!rs)
		return NULL;
	if (port) {
		int i = lb_range_find(rs, bpf_ntohs(port));
		if (i >= 0)
			return &rs->r[i & (LB_RANGES_MAX - 1)].l;
	}
	return rs->has_any ? &rs->any : NULL;
}

/* The kernel's struct bpf_map, reduced to the field read here; CO-RE
 * relocates the offset against the running kernel's BTF. */
struct bpf_map {
	__u32 max_entries;
} __attribute__((preserve_access_index));

/* The size M of a Maglev table: the inner map's max_entries, read from
 * the map the lookup returned (one load, no extra lookup). */
static __always_inline __u32 lb_table_m(void *tbl)
{
	return ((struct bpf_map *)tbl)->max_entries;
}

/* Picks the backend of a flow from its listener's table. Returns the
 * backend index or -1. */
static __always_inline long lb_pick(const struct lb_listener *l, __u32 hash)
{
	__u32 t = l->table;
	void *tbl = bpf_map_lookup_elem(&lb_tables, &t);
	if (!tbl)
		return -1;
	__u32 m = lb_table_m(tbl);
	if (!m)
		return -1;
	__u32 slot = hash % m;
	__u32 *be = bpf_map_lookup_elem(tbl, &slot);
	if (!be || *be >= LB_BACKENDS_MAX)
		return -1;
	return *be;
}

/* Decides the backend of a flow through the connection table, creating
 * or refreshing the entry, and returns it (NULL: no usable backend; *nolst
 * set: the flow's port has no listener) with its index in *idx and the
 * flow's FlowID (the flow hash's low byte, as EIP traffic gets) in *fid.
 * insert=0 never creates an entry (RST and ICMP errors do not either). The
 * flow hash is only computed on a miss: a hit reads the FlowID the entry
 * kept.
 *
 * The listener is looked up only when needed: a live entry made under the
 * VIP's current listener generation lgen (eip_route.lgen, bumped by the
 * daemon after it removes or narrows a listener of the VIP) needs none, its
 * port was listened when the generation began and still is. Any other
 * entry is used only if the listener is still there (as before), and then
 * takes the current generation. A hit costs one hash lookup (lb_conns)
 * where it cost two. */
static __always_inline struct lb_backend *lb_decide(const struct lb_config *c, struct lb_flow *f, __u16 lgen,
						    __u32 seed, int insert, __u32 *idx, __u8 *fid, int *nolst)
{
	struct ct_key k = {.src = f->client, .dst = f->vip, .sport = f->cport, .dport = f->vport, .proto = f->proto};
	__u32 now = (__u32)bpf_jiffies64();
	int syn = f->proto == IPPROTO_TCP_ && (f->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	struct ct_entry *e = bpf_map_lookup_elem(&lb_conns, &k);
	struct lb_listener *l = NULL;
	struct lb_backend *be = NULL;
	int live = 0;

	*nolst = 0;
	if (e) {
		__u32 i = e->backend;
		be = bpf_map_lookup_elem(&lb_backends, &i);
		live = be && be->gen == e->gen && !(be->flags & LB_BE_DOWN) &&
		       (__u32)(now - e->last) <= ct_timeout(c, e->state);
		if (live && !syn && e->lgen != lgen) {
			l = lb_listener_for(f->vip, f->proto, f->vport);
			if (!l) {
				*nolst = 1;
				return NULL;
			}
			e->lgen = lgen;
		}
		if (live && !syn) {
			/* Write only what changed: the entry's cache line stays
			 * clean for the many packets of a jiffy. */
			if (e->last != now)
				e->last = now;
			if (!f->icmp) {
				__u8 st = ct_next(e->state, f->proto, f->tcp_flags);
				if (st != e->state) {
					e->state = st;
					if (ct_sync_on)
						ct_emit(&k, e, CT_EV_STATE);
				}
			}
			*idx = i;
			*fid = e->fid;
			return be;
		}
	}
	if (!l)
		l = lb_listener_for(f->vip, f->proto, f->vport);
	if (!l) {
		*nolst = 1;
		return NULL;
	}
	if (e)
		info_inc(syn && live ? LBI_SYN_REPICK : LBI_CT_STALE);
	else
		info_inc(LBI_CT_MISS);

	__be32 ports = ports_of(f->cport, f->vport);
	f->hash = flow_hash4(f->client, f->vip, ports, f->proto, seed);
	*fid = (__u8)f->hash;
	long pick = lb_pick(l, f->hash);
	if (pick < 0)
		return NULL;
	__u32 i = pick;
	be = bpf_map_lookup_elem(&lb_backends, &i);
	if (!be)
		return NULL;
	*idx = i;
	/* No entry: when told not to (ICMP errors), for a RST, and for a
	 * backend that is down (every backend of the pool is: the packet
	 * goes to one anyway, but no state is written for it per packet). */
	if (!insert || (f->proto == IPPROTO_TCP_ && (f->tcp_flags & TCP_RST_)) || (be->flags & LB_BE_DOWN))
		return be;
	/* A SYN replacing an existing entry does not grow the table: it needs
	 * no token, and must not leave the old entry to catch the rest of the
	 * new connection. */
	if (!e && !ct_insert_allowed(c, now)) {
		info_inc(LBI_CT_INSERT_LIMITED);
		return be;
	}
	struct ct_entry n = {.backend = i, .gen = be->gen, .last = now, .fid = (__u8)f->hash,
			     .state = ct_next(0, f->proto, f->tcp_flags), .lgen = lgen};
	bpf_map_update_elem(&lb_conns, &k, &n, BPF_ANY);
	if (ct_sync_on)
		ct_emit(&k, &n, CT_EV_NEW);
	if (be->mode == LB_MODE_NAT) {
		/* The reply tuple after DNAT, back to the VIP's. */
		struct nat_rkey rk = {.baddr = be->addr, .caddr = f->client, .bport = be->port ? be->port : f->vport,
				      .cport = f->cport, .proto = f->proto};
		struct nat_rentry rv = {.vip = f->vip, .vport = f->vport};
		bpf_map_update_elem(&lb_nat_conns, &rk, &rv, BPF_ANY);
	}
	info_inc(LBI_CT_INSERT);
	lb_count(&lb_be_stats, i, 0, 1);
	return be;
}


/* lb_listener_for for an IPv6 flow: the listener of rm->k's VIP, protocol
 * and port, found in lb_listeners6 then lb_ranges6 (the exact port, the
 * ranges, the any-port listener, as for IPv4). The keys are built in rm
 * (per-CPU scratch), not on the stack. */
static __always_inline struct lb_listener *lb_listener_for6(struct lb6_keys *rm)
{
	__builtin_memcpy(&rm->lk.vip, &rm->k.dst, 16);
	rm->lk.port = rm->k.dport;
	rm->lk.proto = rm->k.proto;
	rm->lk.pad = 0;
	struct lb_listener *l = bpf_map_lookup_elem(&lb_listeners6, &rm->lk);
	if (l)
		return l;
	__builtin_memcpy(&rm->rk.vip, &rm->k.dst, 16);
	rm->rk.proto = rm->k.proto;
	rm->rk.pad[0] = rm->rk.pad[1] = rm->rk.pad[2] = 0;
	struct lb_ranges *rs = bpf_map_lookup_elem(&lb_ranges6, &rm->rk);
	if (!rs)
		return NULL;
	if (rm->k.dport) {
		int i = lb_range_find(rs, bpf_ntohs(rm->k.dport));
		if (i >= 0)
			return &rs->r[i & (LB_RANGES_MAX - 1)].l;
	}
	return rs->has_any ? &rs->any : NULL;
}

/* lb_decide for an IPv6 flow (the key rm->k, client -> VIP): the same
 * connection-table logic in lb_conns6 (the entry, its timeouts and states,
 * the insert cap, the listener generation lgen, the backend's generation),
 * the flow hash flow_hash6, connection sync (ct_emit6 into the same ring).
 * Not yet: nat mode (an IPv6 VIP is encap only). */
static __always_inline struct lb_backend *lb_decide6(const struct lb_config *c, struct lb6_keys *rm, __u8 tcp_flags,
						     __u16 lgen, __u32 seed, __u32 *idx, __u8 *fid, int *nolst)
{
	__u8 proto = rm->k.proto;
	__u32 now = (__u32)bpf_jiffies64();
	int syn = proto == IPPROTO_TCP_ && (tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	struct ct_entry *e = bpf_map_lookup_elem(&lb_conns6, &rm->k);
	struct lb_listener *l = NULL;
	struct lb_backend *be = NULL;
	int live = 0;

	*nolst = 0;
	if (e) {
		__u32 i = e->backend;
		be = bpf_map_lookup_elem(&lb_backends, &i);
		live = be && be->gen == e->gen && !(be->flags & LB_BE_DOWN) &&
		       (__u32)(now - e->last) <= ct_timeout(c, e->state);
		if (live && !syn && e->lgen != lgen) {
			l = lb_listener_for6(rm);
			if (!l) {
				*nolst = 1;
				return NULL;
			}
			e->lgen = lgen;
		}
		if (live && !syn) {
			if (e->last != now)
				e->last = now;
			__u8 st = ct_next(e->state, proto, tcp_flags);
			if (st != e->state) {
				e->state = st;
				if (ct_sync_on)
					ct_emit6(&rm->k, e, CT_EV_STATE);
			}
			*idx = i;
			*fid = e->fid;
			return be;
		}
	}
	if (!l)
		l = lb_listener_for6(rm);
	if (!l) {
		*nolst = 1;
		return NULL;
	}
	if (e)
		info_inc(syn && live ? LBI_SYN_REPICK : LBI_CT_STALE);
	else
		info_inc(LBI_CT_MISS);

	__u32 hash = flow_hash6(rm->k.src.a, rm->k.dst.a, ports_of(rm->k.sport, rm->k.dport), proto, seed);
	*fid = (__u8)hash;
	long pick = lb_pick(l, hash);
	if (pick < 0)
		return NULL;
	__u32 i = pick;
	be = bpf_map_lookup_elem(&lb_backends, &i);
	if (!be)
		return NULL;
	*idx = i;
	if ((proto == IPPROTO_TCP_ && (tcp_flags & TCP_RST_)) || (be->flags & LB_BE_DOWN))
		return be;
	if (!e && !ct_insert_allowed(c, now)) {
		info_inc(LBI_CT_INSERT_LIMITED);
		return be;
	}
	struct ct_entry n = {.backend = i, .gen = be->gen, .last = now, .fid = (__u8)hash,
			     .state = ct_next(0, proto, tcp_flags), .lgen = lgen};
	bpf_map_update_elem(&lb_conns6, &rm->k, &n, BPF_ANY);
	if (ct_sync_on)
		ct_emit6(&rm->k, &n, CT_EV_NEW);
	info_inc(LBI_CT_INSERT);
	lb_count(&lb_be_stats, i, 0, 1);
	return be;
}

#endif
