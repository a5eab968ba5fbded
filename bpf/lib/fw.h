/* fw.h: the edge's firewall, evaluated first for a packet from the Internet
 * side to an EIP or VIP (issue 9; docs/dataplane.md, "Firewall").
 *
 * The planner (internal/fwplan) gives every destination a scope: 0 holds
 * the global rules, each other scope the rules of a set and of an address,
 * merged (destinations with the same rules share one). fw_rules is an LPM
 * trie on (scope, source prefix) whose entry carries every rule of the
 * scope whose prefix contains the entry's, so the longest match is all a
 * packet needs: at most two lookups (its scope, and scope 0 when global
 * rules exist), each skipped when a Bloom filter of the trie's keys
 * (fw_bloom) says no entry can hold the source: a source no rule names
 * costs a probe per prefix length in use, not a trie walk. The route
 * cache holds the destination's scope and flags (eip_centry.fw): a
 * destination no rule can touch pays one test.
 *
 * For a packet: any matching deny rule drops it; else if the destination
 * has an allow list (FW_C_PRIVATE) and no allow rule matches, it is
 * dropped; else it passes. A port range only matches a TCP or UDP packet
 * with ports (unfragmented, or a first fragment); a rule without ports
 * matches later fragments too. */
#ifndef AZG_FW_H
#define AZG_FW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"
#include "stats.h"

/* The scope and flags of destination addr, for the route cache. */
static __always_inline __u32 fw_dest(__be32 addr)
{
	__u32 zero = 0, fw = 0;
	struct fw_dst *g = bpf_map_lookup_elem(&fw_global, &zero);
	if (g)
		fw = g->flags & (FW_C_GLOBAL | FW_C_PRIVATE);
	struct fw_dst *d = bpf_map_lookup_elem(&fw_dst, &addr);
	if (d)
		fw |= (d->scope & FW_SCOPE_MASK) | (d->flags & FW_C_PRIVATE);
	return fw;
}

static __always_inline void fw_count(__u32 rule, __u64 len)
{
	struct fw_stats *s = bpf_map_lookup_elem(&fw_stats, &rule);
	if (s) {
		s->packets++;
		s->bytes += len;
	}
}

/* The Bloom filter's bit of a key: scope, source (host order, masked to
 * len bits), len. The same function as internal/fwplan BloomBit (tested
 * against it through the program). */
static __always_inline __u32 fw_bloom_bit(__u32 scope, __u32 src, __u32 len)
{
	__u32 h = scope * HASH_MUL_GOLDEN ^ src * HASH_MUL_XX2 ^ len * HASH_MUL_XX3;
	h ^= h >> 15;
	h *= 0x2C1B3C6Du;
	h ^= h >> 12;
	return h & (FW_BLOOM_WORDS * 64 - 1);
}

/* Whether scope may hold an entry for src (host order): one probe per
 * source prefix length in use; no bit set, no entry. */
static __always_inline int fw_maybe(const struct fw_dst *g, __u32 scope, __u32 src)
{
	if (!g || g->nlens > FW_LENS)
		return 1;
	__u32 n = g->nlens;
	for (int i = 0; i < FW_LENS; i++) {
		if (i >= n)
			break;
		__u32 l = g->lens[i];
		if (l > 32)
			return 1;
		__u32 m = l ? ~0u << (32 - l) : 0;
		__u32 b = fw_bloom_bit(scope, src & m, l);
		__u32 w = b >> 6;
		__u64 *word = bpf_map_lookup_elem(&fw_bloom, &w);
		if (!word || (*word & (1ULL << (b & 63))))
			return 1;
	}
	return 0;
}

/* The rules of one scope that match: returns the first deny rule's index
 * + 1, else leaves *allow at the first allow rule's index + 1 (if it was
 * 0) and returns 0. */
static __always_inline __u32 fw_scan(__u32 scope, __be32 saddr, __u8 proto, __u32 port, __u32 *allow)
{
	struct fw_key k = {.prefixlen = 64, .scope = scope, .saddr = saddr};
	struct fw_entry *e = bpf_map_lookup_elem(&fw_rules, &k);
	if (!e)
		return 0;
	__u32 n = e->n;
	for (int i = 0; i < FW_REFS; i++) {
		if (i >= n)
			break;
		struct fw_ref *r = &e->r[i];
		if (r->proto && r->proto != proto)
			continue;
		if (port > 0xffff ? (r->port_lo != 0 || r->port_hi != 0xffff) : (port < r->port_lo || port > r->port_hi))
			continue;
		if (r->action == FW_DENY)
			return r->rule + 1;
		if (!*allow)
			*allow = r->rule + 1;
	}
	return 0;
}

/* Verdicts (fw_vslot.verdict): the deciding rule in the low bits. */
#define FW_V_DENY (1u << 31)
#define FW_V_ALLOW (1u << 30)
#define FW_V_PRIVATE (1u << 29)
#define FW_V_RULE 0x1fffffffu

/* The verdict for a source, protocol and port (port above 0xffff: none)
 * at a destination whose eip_centry.fw is fw. */
static __always_inline __u32 fw_verdict(__be32 saddr, __u8 proto, __u32 port, __u32 fw)
{
	__u32 allow = 0, deny = 0;
	__u32 scope = fw & FW_SCOPE_MASK;
	__u32 zero = 0;
	__u32 src = bpf_ntohl(saddr);
	const struct fw_dst *g = bpf_map_lookup_elem(&fw_global, &zero);
	if (scope && fw_maybe(g, scope, src))
		deny = fw_scan(scope, saddr, proto, port, &allow);
	if (!deny && (fw & FW_C_GLOBAL) && fw_maybe(g, 0, src))
		deny = fw_scan(0, saddr, proto, port, &allow);
	if (deny)
		return FW_V_DENY | ((deny - 1) & FW_V_RULE);
	if (allow)
		return FW_V_ALLOW | ((allow - 1) & FW_V_RULE);
	if (fw & FW_C_PRIVATE)
		return FW_V_PRIVATE;
	return 0;
}

/* The verdict from the tries for a cache miss (pp: protocol << 17 |
 * port, as fw_drop's). Global (verified once, on its own): its loops add
 * no states to the paths that follow, and a cache hit does not pay the
 * call (~9 ns here, BENCHMARKS.md). */
__noinline __u32 fw_lookup(__be32 saddr, __u32 pp, __u32 fw)
{
	return fw_verdict(saddr, (__u8)(pp >> 17), pp & 0x1ffff, fw);
}

/* Whether the firewall drops p (counted: the deny rule, or
 * drop_fw_private; an allowed packet counts on its first allow rule). fw
 * is the destination's eip_centry.fw, not 0; gen its eip_centry.gen (the
 * route generation + 1, read before the route and fw were). The verdict
 * comes from the per-CPU cache when a packet of the same source, protocol
 * and port to a destination of the same scope and flags had it under the
 * same generation (the edge bumps it after every firewall write); else
 * from fw_lookup. The generation is the one read before this packet's
 * route: a bump made while a miss reads the old rules leaves its verdict
 * stale, not current; and no second read of eip_route_gen per packet. */
static __always_inline int fw_drop(struct xdp_md *ctx, const struct pkt *p, __u32 fw, __u64 gen, __u32 len)
{
	__be32 saddr = p->saddr;
	__u8 proto = p->proto;
	/* Above 0xffff: no port (not TCP or UDP, or a later fragment). A
	 * first fragment is matched on its ports: the parser leaves them out
	 * of p->ports (for hashing) but has checked its whole L4 header is
	 * there; treated as port-less, a SYN to a denied port split in two
	 * would pass the deny whole. */
	__u32 port = 0x10000;
	if ((proto == IPPROTO_TCP_ || proto == IPPROTO_UDP_) && p->l4_ok) {
		if (!p->frag) {
			port = bpf_ntohs(pkt_dport(p));
		} else {
			void *data = (void *)(long)ctx->data;
			void *data_end = (void *)(long)ctx->data_end;
			__be16 *dp = data + OFF(p->l4_off) + 2;
			if ((void *)(dp + 1) <= data_end)
				port = bpf_ntohs(*dp);
		}
	}
	__u32 pp = ((__u32)proto << 17) | port;
	__u32 v;
	__u32 slot = ((__u32)saddr * HASH_MUL_GOLDEN ^ fw * HASH_MUL_GOLDEN ^ pp * HASH_MUL_XX2) >>
		     (32 - __builtin_ctz(FW_VCACHE_SLOTS));
	struct fw_vslot *c = bpf_map_lookup_elem(&fw_vcache, &slot);
	if (c && c->gen == gen && c->saddr == saddr && c->fw == fw && c->pp == pp) {
		v = c->verdict;
	} else {
		v = fw_lookup(saddr, pp, fw);
		if (c) {
			c->gen = gen;
			c->saddr = saddr;
			c->fw = fw;
			c->pp = pp;
			c->verdict = v;
		}
	}
	if (v & FW_V_DENY) {
		fw_count(v & FW_V_RULE, len);
		stat_add(STAT_DROP_FW_DENY, len);
		mon_event(ctx, STAT_DROP_FW_DENY, MON_K_DROP);
		return 1;
	}
	if (v & FW_V_ALLOW) {
		fw_count(v & FW_V_RULE, len);
		return 0;
	}
	if (v & FW_V_PRIVATE) {
		stat_add(STAT_DROP_FW_PRIVATE, len);
		mon_event(ctx, STAT_DROP_FW_PRIVATE, MON_K_DROP);
		return 1;
	}
	return 0;
}

/* ---- IPv6 (docs/dataplane.md, "Firewall"): the same rules, scopes and
 * counters; IPv6 sources in fw_rules6, IPv6 destinations in fw_dst6,
 * verdicts in fw_vcache6. No Bloom filter in front of fw_rules6 (it
 * holds IPv4 keys only): a cache miss walks the trie. Everything below
 * runs in global functions, verified on their own: the IPv6 path
 * (edge_ipv6) has no stack left, and the IPv4 path pays nothing. */

/* The scope and flags of IPv6 destination addr, for eip_centry6.fw. */
static __always_inline __u32 fw_dest6(const struct ip_addr *addr)
{
	__u32 zero = 0, fw = 0;
	struct fw_dst *g = bpf_map_lookup_elem(&fw_global, &zero);
	if (g)
		fw = g->flags & (FW_C_GLOBAL | FW_C_PRIVATE);
	struct fw_dst *d = bpf_map_lookup_elem(&fw_dst6, addr);
	if (d)
		fw |= (d->scope & FW_SCOPE_MASK) | (d->flags & FW_C_PRIVATE);
	return fw;
}

/* fw_scan for an IPv6 source, its key in c->k (source set; the scope
 * written here): the trie is searched with a key in map memory, the
 * caller's stack being full. */
static __always_inline __u32 fw_scan6(struct fw_vslot6 *c, __u32 scope, __u8 proto, __u32 port, __u32 *allow)
{
	c->k.prefixlen = 32 + 128;
	c->k.scope = scope;
	struct fw_entry *e = bpf_map_lookup_elem(&fw_rules6, &c->k);
	if (!e)
		return 0;
	__u32 n = e->n;
	for (int i = 0; i < FW_REFS; i++) {
		if (i >= n)
			break;
		struct fw_ref *r = &e->r[i];
		if (r->proto && r->proto != proto)
			continue;
		if (port > 0xffff ? (r->port_lo != 0 || r->port_hi != 0xffff) : (port < r->port_lo || port > r->port_hi))
			continue;
		if (r->action == FW_DENY)
			return r->rule + 1;
		if (!*allow)
			*allow = r->rule + 1;
	}
	return 0;
}

/* fw_verdict for an IPv6 source, of cache slot c (its source, fw and pp
 * as fw_drop's written): everything from c, so that only c, the allow
 * rule and the caller's two values stay live across the trie lookups
 * (the registers the calls keep; a spill is stack this path has not). */
static __always_inline __u32 fw_verdict6(struct fw_vslot6 *c)
{
	__u32 allow = 0, deny = 0;
	__u32 scope = c->fw & FW_SCOPE_MASK;
	if (scope)
		deny = fw_scan6(c, scope, c->pp >> 17, c->pp & 0x1ffff, &allow);
	if (!deny && (c->fw & FW_C_GLOBAL))
		deny = fw_scan6(c, 0, c->pp >> 17, c->pp & 0x1ffff, &allow);
	if (deny)
		return FW_V_DENY | ((deny - 1) & FW_V_RULE);
	if (allow)
		return FW_V_ALLOW | ((allow - 1) & FW_V_RULE);
	if (c->fw & FW_C_PRIVATE)
		return FW_V_PRIVATE;
	return 0;
}

/* fw_drop for an IPv6 packet to an IPv6 EIP: the counter it is dropped
 * under (drop_fw_deny, drop_fw_private; the caller counts it), or 0. The
 * deciding rule's counter is counted here (deny, or the first allow rule
 * that matched), as fw_drop counts it. r: the destination's route cache
 * slot (r->fw not 0; r->gen as fw_drop's gen). A rule's protocol icmp
 * matches ICMPv6 (fw_ref.proto 1 stands for both), and not next header 1. A port range
 * matches TCP and UDP with ports: unfragmented or a first fragment
 * (parse_ipv6 checked its L4 header is whole; the port is read here, as
 * fw_drop does). Global and without calls: the chain xdp_edge ->
 * ipv6_frame leaves it 32 bytes of stack, so the keys live in the
 * verdict cache's slot, and what it reads from r and c is read again
 * where it is needed rather than kept across a helper call. */
__noinline __u32 fw6_check(struct xdp_md *ctx, const struct pkt6 *p6, const struct eip_centry6 *r)
{
	if (!p6 || !r)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	barrier_var(len); /* one register to keep, not data and data_end */
	const struct pkt *p = &p6->p;
	__u8 proto = p->proto;
	__u32 port = 0x10000;
	if ((proto == IPPROTO_TCP_ || proto == IPPROTO_UDP_) && p->l4_ok) {
		if (!p->frag) {
			port = bpf_ntohs(pkt_dport(p));
		} else {
			__be16 *dp = data + OFF(p->l4_off) + 2;
			if ((void *)(dp + 1) <= data_end)
				port = bpf_ntohs(*dp);
		}
	}
	/* ICMPv6 matches a rule's icmp; next header 1 (IPv4's ICMP, no
	 * ICMP in IPv6) must not: it takes a number no rule names (found by
	 * the scale fuzzer: an allow icmp admitted it). */
	if (proto == IPPROTO_ICMPV6_)
		proto = IPPROTO_ICMP_;
	else if (proto == IPPROTO_ICMP_)
		proto = 0xff;
	__u32 pp = ((__u32)proto << 17) | port;
	barrier_var(pp); /* one register, not proto and port */
	const __be32 *s = p6->saddr.a;
	__u32 slot = ((s[0] ^ s[1] ^ s[2] ^ s[3]) * HASH_MUL_GOLDEN ^ r->fw * HASH_MUL_GOLDEN ^ pp * HASH_MUL_XX2) >>
		     (32 - __builtin_ctz(FW_VCACHE_SLOTS));
	struct fw_vslot6 *c = bpf_map_lookup_elem(&fw_vcache6, &slot);
	if (!c)
		return 0; /* an array's slot: not reached */
	if (c->gen != r->gen || c->fw != r->fw || c->pp != pp || c->k.saddr.a[0] != s[0] ||
	    c->k.saddr.a[1] != s[1] || c->k.saddr.a[2] != s[2] || c->k.saddr.a[3] != s[3]) {
		/* A miss: the slot is rewritten whole, the verdict last. */
		__builtin_memcpy(&c->k.saddr, s, 16);
		c->gen = r->gen;
		c->fw = r->fw;
		c->pp = pp;
		c->verdict = fw_verdict6(c);
	}
	__u32 v = c->verdict;
	if (v & (FW_V_DENY | FW_V_ALLOW)) {
		c->rule = v & FW_V_RULE;
		struct fw_stats *st = bpf_map_lookup_elem(&fw_stats, &c->rule);
		if (st) {
			st->packets++;
			st->bytes += len;
		}
	}
	if (v & FW_V_DENY)
		return STAT_DROP_FW_DENY;
	if (v & FW_V_PRIVATE)
		return STAT_DROP_FW_PRIVATE;
	return 0;
}

#endif
