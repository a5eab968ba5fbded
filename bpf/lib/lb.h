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

/* The families the load balancer's bodies (ct_emit_af, lb_decide_af) are
 * specialised for: always-inline functions called with one of these as a
 * constant, so each caller's copy keeps only its family's code. */
#define LB_AF4 4
#define LB_AF6 6

/* lb_decide_af's pflags: the packet's TCP flags (the low byte) and
 * LB_PF_ICMP for an ICMP error about the flow (found through its quote:
 * it moves no TCP state and makes no entry). One argument, one register
 * across the body's helper calls. */
#define LB_PF_ICMP 0x100

/* struct ct_event and ct_event6 are their key then the same 12 bytes:
 * ct_emit_af writes the key with the key's size and the rest at that
 * offset. */
struct ct_event_tail {
	__u16 backend;
	__u16 gen;
	__u32 last;
	__u8 state;
	__u8 fid;
	__u8 kind;
	__u8 pad;
};
_Static_assert(sizeof(struct ct_event) == sizeof(struct ct_key) + sizeof(struct ct_event_tail), "ct_event layout");
_Static_assert(__builtin_offsetof(struct ct_event, backend) == sizeof(struct ct_key), "ct_event layout");
_Static_assert(sizeof(struct ct_event6) == sizeof(struct ct_key6) + sizeof(struct ct_event_tail), "ct_event6 layout");
_Static_assert(__builtin_offsetof(struct ct_event6, backend) == sizeof(struct ct_key6), "ct_event6 layout");

/* Connection sync: tells the edge's peers about an entry made (k, e; kind
 * CT_EV_NEW) or whose TCP state changed (CT_EV_STATE), as a ct_event
 * (LB_AF4: k a struct ct_key, lb_conns) or ct_event6 (LB_AF6: a struct
 * ct_key6, lb_conns6; 52 bytes against 28, which is how the reader tells
 * them apart) in ct_events read by internal/connsync. Called only then,
 * never on a plain hit, and only while sync runs (ct_sync_on), through
 * ct_emit or ct_emit6: global (separately verified) functions, one per
 * family, as the ring's record size must be a constant. Inlined, its
 * helper calls made lb_ingress spill one more register, and lb_ingress's
 * frame may not grow (xdp_edge, lb_ingress and the 32 bytes the verifier
 * counts for any frame below them take the 512 bytes). The record is
 * built in ring memory, not on the stack; it reads the key and the entry
 * after the reserve, so nothing is kept across the call. A full ring
 * drops the event and counts it (ct_events_lost, maps.h): the peers' copy
 * of that entry waits for the periodic refresh (docs/connsync.md). */
static __always_inline int ct_emit_af(const int af, const void *k, const struct ct_entry *e, __u32 kind)
{
	const __u32 ks = af == LB_AF6 ? sizeof(struct ct_key6) : sizeof(struct ct_key);
	if (!k || !e)
		return 0;
	void *ev = bpf_ringbuf_reserve(&ct_events, ks + sizeof(struct ct_event_tail), 0);
	if (!ev) {
		__sync_fetch_and_add(&ct_events_lost, 1);
		return 0;
	}
	if (af == LB_AF6)
		*(struct ct_key6 *)ev = *(const struct ct_key6 *)k;
	else
		*(struct ct_key *)ev = *(const struct ct_key *)k;
	struct ct_event_tail *t = ev + ks;
	t->backend = e->backend;
	t->gen = e->gen;
	t->last = e->last;
	t->state = e->state;
	t->fid = e->fid;
	t->kind = kind;
	t->pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

__noinline int ct_emit(const struct ct_key *k, const struct ct_entry *e, __u32 kind)
{
	return ct_emit_af(LB_AF4, k, e, kind);
}

__noinline int ct_emit6(const struct ct_key6 *k, const struct ct_entry *e, __u32 kind)
{
	return ct_emit_af(LB_AF6, k, e, kind);
}

/* Keep struct ct_event and ct_event6 in the object's BTF for bpf2go (the
 * program only builds them in ring memory). */
const struct ct_event ct_event_btf __attribute__((unused));
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

/* lb_listener_for for an IPv6 flow: the listener of rm->k's VIP, protocol
 * and port, found in lb_listeners6 then lb_ranges6 (the exact port, the
 * ranges, the any-port listener, as for IPv4). The keys are built in rm
 * (per-CPU scratch), not on the stack. */
static __always_inline struct lb_listener *lb_listener_for6(struct lb6_keys *rm)
{
	ip6w_copy(&rm->lk.vip, &rm->k.dst);
	rm->lk.port = rm->k.dport;
	rm->lk.proto = rm->k.proto;
	rm->lk.pad = 0;
	struct lb_listener *l = bpf_map_lookup_elem(&lb_listeners6, &rm->lk);
	if (l)
		return l;
	ip6w_copy(&rm->rk.vip, &rm->k.dst);
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

/* The listener of connection key k's VIP, protocol and port (LB_AF4: a
 * struct ct_key; LB_AF6: the k of a struct lb6_keys, whose listener keys
 * are built beside it). */
_Static_assert(__builtin_offsetof(struct lb6_keys, k) == 0, "lb6_keys: k first");
static __always_inline struct lb_listener *lb_listener_af(const int af, void *k)
{
	if (af == LB_AF6)
		return lb_listener_for6((struct lb6_keys *)k);
	const struct ct_key *k4 = k;
	return lb_listener_for(k4->dst, k4->proto, k4->dport);
}

/* The flow hash of connection key k (flow_hash4, flow_hash6). */
static __always_inline __u32 lb_hash_af(const int af, const void *k, __u32 seed)
{
	if (af == LB_AF6) {
		const struct ct_key6 *k6 = k;
		return flow_hash6(k6->src.a, k6->dst.a, ports_of(k6->sport, k6->dport), k6->proto, seed);
	}
	const struct ct_key *k4 = k;
	return flow_hash4(k4->src, k4->dst, ports_of(k4->sport, k4->dport), k4->proto, seed);
}

static __always_inline void ct_emit_for(const int af, const void *k, const struct ct_entry *e, __u32 kind)
{
	if (af == LB_AF6)
		ct_emit6(k, e, kind);
	else
		ct_emit(k, e, kind);
}

/* The IPv6 address of nat backend slot i (in the value's vip): its
 * record in lb_nat_backends6 (NAT6_SLOT_PROTO), the key built in ks's
 * scratch. NULL when the slot has none. */
static __always_inline struct nat_rentry6 *lb6_nat_addr(struct lb6_keys *ks, __u32 i)
{
	struct nat_bkey6 *nb = &ks->nb;
	nb->baddr.a[0] = nb->baddr.a[1] = nb->baddr.a[2] = 0;
	nb->baddr.a[3] = i;
	nb->bport = 0;
	nb->proto = NAT6_SLOT_PROTO;
	nb->pad = 0;
	return bpf_map_lookup_elem(&lb_nat_backends6, nb);
}

/* Decides the backend of a flow through the connection table, creating
 * or refreshing the entry, and returns it (NULL: no usable backend; *nolst
 * set: the flow's port has no listener) with its index in *idx and the
 * flow's FlowID (the flow hash's low byte, as EIP traffic gets) in *fid.
 * One body for both families, specialised by the constant af: LB_AF4
 * (k a struct ct_key, client -> VIP, in lb_conns, the hash flow_hash4,
 * events ct_emit) or LB_AF6 (k the k of a struct lb6_keys in per-CPU
 * scratch, lb_conns6, flow_hash6, ct_emit6). proto is k's protocol,
 * pflags the packet's TCP flags and LB_PF_ICMP for an ICMP error about
 * the flow (found through its quote), which creates no entry (a RST does
 * not either) and moves no TCP state: its TCP flags are none (the parser
 * gives a packet that is no TCP none), and ct_next leaves any entry's
 * state (never 0) as it is under none, so the hit path needs no test of
 * its own (one cost IPv4's established flow seven instructions). The flow
 * hash is only computed on a miss: a hit reads the FlowID the entry kept.
 *
 * The listener is looked up only when needed: a live entry made under the
 * VIP's current listener generation lgen (eip_route.lgen, bumped by the
 * daemon after it removes or narrows a listener of the VIP) needs none, its
 * port was listened when the generation began and still is. Any other
 * entry is used only if the listener is still there (as before), and then
 * takes the current generation. A hit costs one hash lookup (lb_conns)
 * where it cost two.
 *
 * A new entry of a nat backend installs the connection's reverse entry:
 * lb_nat_conns (LB_AF4) or lb_nat_conns6 (LB_AF6, the backend's address
 * from lb6_nat_addr, the keys in the scratch beside k). */
static __always_inline struct lb_backend *lb_decide_af(const int af, const struct lb_config *c, void *k, __u8 proto,
						       __u32 pflags, __u16 lgen, __u32 seed, __u32 *idx, __u8 *fid,
						       int *nolst)
{
	__u8 tcp_flags = (__u8)pflags;
	void *conns = af == LB_AF6 ? (void *)&lb_conns6 : (void *)&lb_conns;
	__u32 now = (__u32)bpf_jiffies64();
	int syn = proto == IPPROTO_TCP_ && (tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	struct ct_entry *e = bpf_map_lookup_elem(conns, k);
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
			l = lb_listener_af(af, k);
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
			__u8 st = ct_next(e->state, proto, tcp_flags);
			if (st != e->state) {
				e->state = st;
				if (ct_sync_on)
					ct_emit_for(af, k, e, CT_EV_STATE);
			}
			*idx = i;
			*fid = e->fid;
			return be;
		}
	}
	if (!l)
		l = lb_listener_af(af, k);
	if (!l) {
		*nolst = 1;
		return NULL;
	}
	if (e)
		info_inc(syn && live ? LBI_SYN_REPICK : LBI_CT_STALE);
	else
		info_inc(LBI_CT_MISS);

	__u32 hash = lb_hash_af(af, k, seed);
	*fid = (__u8)hash;
	long pick = lb_pick(l, hash);
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
	if ((pflags & LB_PF_ICMP) || (proto == IPPROTO_TCP_ && (tcp_flags & TCP_RST_)) || (be->flags & LB_BE_DOWN))
		return be;
	/* A SYN replacing an existing entry does not grow the table: it needs
	 * no token, and must not leave the old entry to catch the rest of the
	 * new connection. */
	if (!e && !ct_insert_allowed(c, now)) {
		info_inc(LBI_CT_INSERT_LIMITED);
		return be;
	}
	struct ct_entry n = {.backend = i, .gen = be->gen, .last = now, .fid = (__u8)hash,
			     .state = ct_next(0, proto, tcp_flags), .lgen = lgen};
	bpf_map_update_elem(conns, k, &n, BPF_ANY);
	if (ct_sync_on)
		ct_emit_for(af, k, &n, CT_EV_NEW);
	if (af == LB_AF4 && be->mode == LB_MODE_NAT) {
		/* The reply tuple after DNAT, back to the VIP's. */
		const struct ct_key *k4 = k;
		struct nat_rkey rk = {.baddr = be->addr, .caddr = k4->src, .bport = be->port ? be->port : k4->dport,
				      .cport = k4->sport, .proto = proto};
		struct nat_rentry rv = {.vip = k4->dst, .vport = k4->dport};
		bpf_map_update_elem(&lb_nat_conns, &rk, &rv, BPF_ANY);
	}
	if (af == LB_AF6 && be->mode == LB_MODE_NAT) {
		/* The same for an IPv6 flow (lb_nat_conns6), its keys built
		 * in the scratch beside k: the backend's address is its
		 * slot's (lb6_nat_addr; none: no entry, lb6_nat_in drops the
		 * packet). */
		struct lb6_keys *ks = k;
		struct nat_rentry6 *ba = lb6_nat_addr(ks, i);
		if (ba) {
			ip6w_copy(&ks->nk.baddr, &ba->vip);
			ip6w_copy(&ks->nk.caddr, &ks->k.src);
			ks->nk.bport = be->port ? be->port : ks->k.dport;
			ks->nk.cport = ks->k.sport;
			ks->nk.proto = proto;
			ks->nk.pad[0] = ks->nk.pad[1] = ks->nk.pad[2] = 0;
			ip6w_copy(&ks->nv.vip, &ks->k.dst);
			ks->nv.vport = ks->k.dport;
			ks->nv.pad = 0;
			bpf_map_update_elem(&lb_nat_conns6, &ks->nk, &ks->nv, BPF_ANY);
		}
	}
	info_inc(LBI_CT_INSERT);
	lb_count(&lb_be_stats, i, 0, 1);
	return be;
}

/* lb_decide_af for an IPv4 flow f (its key built on the stack). */
static __always_inline struct lb_backend *lb_decide(const struct lb_config *c, struct lb_flow *f, __u16 lgen,
						    __u32 seed, __u32 *idx, __u8 *fid, int *nolst)
{
	struct ct_key k = {.src = f->client, .dst = f->vip, .sport = f->cport, .dport = f->vport, .proto = f->proto};
	return lb_decide_af(LB_AF4, c, &k, f->proto, f->tcp_flags | (f->icmp ? LB_PF_ICMP : 0), lgen, seed, idx, fid,
			    nolst);
}

/* lb_decide_af for an IPv6 flow, its key in rm->k (client -> VIP). */
static __always_inline struct lb_backend *lb_decide6(const struct lb_config *c, struct lb6_keys *rm, __u32 pflags,
						     __u16 lgen, __u32 seed, __u32 *idx, __u8 *fid, int *nolst)
{
	return lb_decide_af(LB_AF6, c, &rm->k, rm->k.proto, pflags, lgen, seed, idx, fid, nolst);
}

#endif
