//go:build ignore

/* edge.c: the azgate edge data plane (XDP), attached to the edge's
 * Internet-facing and underlay interfaces.
 *
 * Lookup order for a packet from the Internet, most specific first:
 * (VIP, protocol, port) then (VIP, protocol, any port): a load-balanced
 * service (lib/lb.h; an IPv6 VIP's in lb6_ingress, encap mode only); the destination /32: an EIP, encapsulated in NVGRE to
 * the AZ host it is bound to; a reply of a nat-mode connection (or an ICMP
 * error about one): translated back to its VIP; else the kernel,
 * untouched.
 * From the underlay: NVGRE addressed to this edge is decapsulated and
 * forwarded, but only if its inner source is an EIP bound to the host that
 * sent it, or a VIP whose flow that host's guest serves (anti-spoofing).
 * Anything malformed is counted and dropped. */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* The edge's maps (lib/maps.h). */
#define AZG_PROG_EDGE 1

#include "lib/consts.h"
#include "lib/structs.h"
#include "lib/maps.h"
#include "lib/csum.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/stats.h"
/* The edge's IPv6 paths, inlined in entry.h's ipv6_frame for every valid
 * IPv6 packet (defined below): one frame for both, the packet's included,
 * under xdp_edge's (the three and the deepest call fit the 512 bytes). */
static __always_inline int edge_ipv6(struct xdp_md *ctx, struct pkt6 *p6);
#define AZG_IPV6_PATHS edge_ipv6
/* The IPv6 VIPs' load balancer (defined below), called from xdp_edge's
 * frame with the packet edge_ipv6 left in edge_rooms.lb6: lb6_ingress, its
 * nat half lb6_nat_in and the nat replies' lb6_nat_reverse, each global
 * and called from that frame (lb6_entry, inlined there): the stack of
 * xdp_edge's frame and lb6_ingress's leaves no room for another. */
static __always_inline int lb6_entry(struct xdp_md *ctx, __u32 arg);
#define AZG_IPV6_VIP lb6_entry
/* Neighbor solicitations (lib/ndp.h), answered from xdp_edge's frame. */
__noinline int ndp_answer(struct xdp_md *ctx);
#define AZG_IPV6_NDP ndp_answer
/* The tunnel over the IPv6 underlay (defined below), called from
 * xdp_edge's frame with the request its path left in edge_rooms.ul6
 * (ul6_ask). */
__noinline int tunnel6(struct xdp_md *ctx);
#define AZG_IPV6_UL6 tunnel6
/* NVGRE over IPv6 from a host: its outer headers, which edge_ipv6 left
 * in edge_rooms.ul6, into the entry's struct pkt (defined below). */
static __always_inline int ul6_outer(struct pkt *p);
#define AZG_UL6_OUTER ul6_outer
/* An IPv6 packet to no EIP or VIP that is to the IPv6 health-check
 * address (lib/hc.h hc6_direct): drop_spoof. */
static __always_inline __u32 hc6_direct(const struct pkt6 *p6, __u64 len);
#define AZG_IPV6_NOT_OURS hc6_direct
#include "lib/entry.h"
#include "lib/nvgre.h"
#include "lib/icmp.h"
#include "lib/fib.h"
#include "lib/nat.h"
#include "lib/lb.h"
#include "lib/hc.h" /* health checks through the tunnel */
#include "lib/ratelimit.h" /* per-source and SYN rate limits */
#include "lib/fw.h" /* the firewall */
#include "lib/bw.h" /* per-EIP bandwidth limits */
#include "lib/ndp.h" /* neighbor discovery for the IPv6 VIPs */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The route of an IPv4 destination (an EIP, or a VIP flagged ROUTE_F_VIP),
 * through eip_cache; NULL when eip_routes has none. The generation is read
 * before the route: a route written after that read bumps it after, so the
 * slot filled here is not used again. (Decapsulation's check of the inner
 * source keeps the hash lookup: inlined there too, this cost the verifier
 * 76k more instructions of xdp_edge.) */
static __always_inline struct eip_centry *eip_route4(__be32 addr)
{
	__u32 zero = 0;
	__u64 *gp = bpf_map_lookup_elem(&eip_route_gen, &zero);
	if (!gp)
		return NULL;
	__u64 tag = *gp + 1;
	__u32 slot = ((__u32)addr * HASH_MUL_GOLDEN) >> (32 - __builtin_ctz(EIP_CACHE_SLOTS));
	struct eip_centry *c = bpf_map_lookup_elem(&eip_cache, &slot);
	if (!c)
		return NULL;
	if (c->gen == tag && c->addr == addr)
		return c;
	struct eip_key k;
	eip_key4(&k, addr);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if (!r)
		return NULL;
	c->addr = addr;
	c->host = r->host.a[0];
	c->vsid = r->vsid;
	c->stats_idx = r->stats_idx;
	c->flags = bw_route_flags(rl_route_flags(r->flags, addr), addr);
	c->lgen = r->lgen;
	c->fw = fw_dest(addr);
	c->gen = tag;
	return c;
}

/* An ICMP error decided on a packet's path (ttl_expired, too_big) is sent
 * by edge_main (icmp_send), as ICMP_DEFER | kind << 16 | MTU in place of
 * an XDP action: called from lb_ingress, a global function, its frames
 * would overflow the 512-byte stack of that path. */
#define ICMP_DEFER 0x40000000

/* ul6_ask's im argument: the inner destination MAC in its low 48 bits
 * (in memory order), UL6_INNER6 for an IPv6 inner packet, the counter
 * of a sent packet from bit 56. */
#define UL6_INNER6 (1ULL << 48)

/* What a path answers for a packet to a host with an IPv6 underlay
 * address (UL6_HOST) once ul6_ask holds its request: not an XDP action.
 * Above ICMP_DEFER's answers, so icmp_send, which every IPv4 path's
 * answer goes through, sees it behind the compare that lets the sent
 * packets by: the IPv4 hosts' packets pay nothing for it. */
#define UL6_DEFER 0x50000000

/* Answers an expired TTL, as a router hop must. */
static __always_inline int ttl_expired(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg, __u64 len)
{
	if (!(cfg->flags & CFG_F_ICMP_TTL))
		return count_drop(ctx, STAT_DROP_TTL, len);
	return ICMP_DEFER | (ICMP_KIND_TTL << 16);
}

/* Answers a packet that does not fit the next hop's MTU. */
static __always_inline int too_big(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg, __u16 mtu,
				   __u64 len)
{
	if (!p->df)
		return count_drop(ctx, STAT_DROP_TOO_BIG, len);
	return ICMP_DEFER | (ICMP_KIND_FRAG << 16) | mtu;
}

/* Sends the ICMP error act defers (else returns act): time exceeded or
 * fragmentation needed, each within its own budget (lib/icmp.h). */
static __always_inline int icmp_send(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg, int act,
				     __u64 len)
{
	if (act < ICMP_DEFER)
		return act;
	if (act == UL6_DEFER) {
		/* A host with an IPv6 underlay address (ul6_ask). */
		act = tunnel6(ctx);
		if (act < ICMP_DEFER)
			return act;
	}
	int rc;
	if (((act >> 16) & 0xff) == ICMP_KIND_TTL) {
		rc = icmp4_error(ctx, p, ICMP_WHAT(ICMP_KIND_TTL, ICMP_TIME_EXCEEDED_, ICMP_EXC_TTL_, 0), cfg->icmp_src.a[0]);
		if (rc == ICMP_SENT) {
			count_out(ctx, STAT_ICMP_TTL_TX, len);
			return XDP_TX;
		}
		return count_drop(ctx, rc == ICMP_LIMITED ? STAT_DROP_ICMP_LIMIT : STAT_DROP_TTL, len);
	}
	rc = icmp4_error(ctx, p, ICMP_WHAT(ICMP_KIND_FRAG, ICMP_DEST_UNREACH_, ICMP_FRAG_NEEDED_, act & 0xffff),
			 cfg->icmp_src.a[0]);
	if (rc == ICMP_SENT) {
		count_out(ctx, STAT_ICMP_FRAG_TX, len);
		return XDP_TX;
	}
	return count_drop(ctx, rc == ICMP_LIMITED ? STAT_DROP_ICMP_LIMIT : STAT_DROP_TOO_BIG, len);
}

/* The tunnel to a host with an IPv6 underlay address, asked for: the
 * packet p (its offset, length, TOS, DF and TCP flags) to the host named
 * host with key, inner MAC and counter in im, idx the slot to count it in
 * once sent (eip_stats for encap_tx, lb_be_stats for lb_*_tx), written to
 * edge_rooms.ul6 for tunnel6, which the path's answer (UL6_DEFER, the IPv6
 * paths' FRAME_UL6) gets called from xdp_edge's frame: tunnel6's stack
 * does not fit under lb_ingress's or ipv6_frame's. Returns UL6_DEFER (or
 * XDP_ABORTED without its room). Global, with scalars: the IPv4 paths'
 * registers and stack stay as they were. */
__noinline int ul6_ask(const struct pkt *p, __u32 host, __u32 key, __u64 im, __u32 idx)
{
	struct ul6_room *ur = EDGE_ROOM(ul6);
	if (!p || !ur)
		return XDP_ABORTED;
	struct ul6_req *rq = &ur->req;
	rq->im = im;
	rq->host = host;
	rq->key = key;
	rq->idx = idx;
	rq->ip_len = p->ip_len;
	rq->l3_off = p->l3_off;
	rq->tos = p->tos;
	rq->df = p->df;
	rq->syn = (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	return UL6_DEFER;
}

/* Encapsulates the IPv4 packet p in NVGRE toward host with key, inner
 * destination MAC imac. Returns an XDP action; *sent is set when the
 * packet was transmitted. */
static __always_inline int tunnel(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg,
				  struct bpf_fib_lookup *fibp, __be32 host, __u32 key, const __u8 *imac, __u32 stat,
				  __u32 idx, __u64 len, int *sent)
{
	__be32 ul = cfg->underlay.a[0];
	*sent = 0;
	if (p->ttl <= 1)
		return ttl_expired(ctx, p, cfg, len);
	/* The FlowID stands for the flow's ports in the lookup, so ECMP
	 * spreads one host's tunnels (with the L4 multipath hash policy) as
	 * the underlay's routers do by the key. */
	__u32 fid = key & 0xff;
	int rc = fib4f(ctx, fibp, cfg->nh_gen, ul, host, p->ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0,
		       bpf_htons(fid), fid);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return too_big(ctx, p, cfg, fibp->mtu_result > NVGRE_OVERHEAD + 68 ? fibp->mtu_result - NVGRE_OVERHEAD : 68,
			       len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		if (rc == FIB_RET_UL6) {
			/* A host of the IPv6 underlay (fib4_miss answers
			 * for its name): the IPv4 hosts' packets pay
			 * nothing for it. */
			__u64 im = 0;
			__builtin_memcpy(&im, imac, ETH_ALEN_);
			return ul6_ask(p, host, key, im | (__u64)stat << 56, idx);
		}
		return count_drop(ctx, fib_reason(rc), len);
	}

	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + OFF(p->l3_off);
	if ((void *)(iph + 1) > data_end)
		return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
	ipv4_dec_ttl(iph);

	/* (The inner source MAC copied first: with cfg live across the
	 * push, clang 14 spills on lb_ingress's shared nat path, one more
	 * instruction a packet there.) */
	__u8 gw[ETH_ALEN_];
	__builtin_memcpy(gw, cfg->gw_mac, ETH_ALEN_);
	if (nvgre_to(ctx, p->l3_off, p->ip_len, p->tos, fibp, ul, host, key, imac, gw))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	count_out(ctx, stat, len);
	*sent = 1;
	return xmit(ctx, fibp->ifindex);
}

/* Make-before-break drift (docs/dataplane.md "EIP drift"): for a packet
 * from the Internet to an EIP whose route is flagged ROUTE_F_DRIFT (the
 * keys in rm: the route's, the flow's), where it goes: 0 for the live
 * binding (the route's host and vsid), else the previous binding,
 * prev_host | prev_vsid << 32. A TCP SYN without ACK goes live and its
 * flow is recorded in drift_flows (drift_flow_new; drift_flow_fail if
 * the map refuses it: the SYN still goes live); any other TCP segment
 * goes live if its flow was recorded for the live host, else to the
 * previous binding (drift_prev_tx): the connections open at the move
 * stay where they are. UDP, ICMP and the rest go live. With PREV_F_ALL
 * (the make-before-break delay) every packet goes to the previous
 * binding and no flow is recorded. The route is read
 * from eip_routes (the caches hold no previous binding: only this path
 * reads one, from eip_prev). */
static __always_inline __u64 drift_pick(struct drift_room *rm, __u8 tcp_flags, __u64 len)
{
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &rm->ek);
	if (!r || !(r->flags & ROUTE_F_DRIFT))
		return 0;
	struct eip_prev *pv = bpf_map_lookup_elem(&eip_prev, &rm->ek);
	if (!pv)
		return 0;
	if (pv->flags & PREV_F_ALL)
		goto prev;
	if (rm->k.proto != IPPROTO_TCP_)
		return 0;
	__be32 live = r->host.a[0];
	__be32 *v = bpf_map_lookup_elem(&drift_flows, &rm->k);
	if (v && *v == live)
		return 0;
	if ((tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_) {
		if (bpf_map_update_elem(&drift_flows, &rm->k, &live, BPF_ANY))
			stat_add(STAT_DRIFT_FLOW_FAIL, len);
		else
			stat_add(STAT_DRIFT_FLOW_NEW, len);
		return 0;
	}
prev:
	stat_add(STAT_DRIFT_PREV_TX, len);
	return (__u64)pv->vsid << 32 | pv->host;
}

/* Whether a drifting EIP's previous binding (eip_prev) is host and vsid:
 * the host the EIP moved from may send its packets (the replies of the
 * connections open at the move). */
static __always_inline int drift_from(const struct eip_key *k, __be32 host, __u32 vsid)
{
	struct eip_prev *pv = bpf_map_lookup_elem(&eip_prev, k);
	return pv && pv->host == host && pv->vsid == vsid;
}

/* drift_from for an IPv4 EIP. Global, with scalars: edge_from_host calls
 * it for a drifting route only, and its own stack stays as it was. */
__noinline int drift_from4(__be32 eip, __be32 host, __u32 vsid)
{
	struct eip_key k;
	eip_key4(&k, eip);
	return drift_from(&k, host, vsid);
}

/* drift_pick for an IPv4 packet p to an EIP, len the frame's length.
 * Global: only a drifting route's packets call it, and its keys are in
 * edge_rooms.drift, off edge_to_host's stack. */
__noinline __u64 drift4(const struct pkt *p, __u64 len)
{
	struct drift_room *rm = EDGE_ROOM(drift);
	if (!p || !rm)
		return 0;
	eip_key4(&rm->ek, p->daddr);
	__builtin_memset(&rm->k, 0, sizeof(rm->k));
	rm->k.eip.a[0] = p->daddr;
	rm->k.client.a[0] = p->saddr;
	rm->k.ports = p->ports;
	rm->k.family = AF_INET_;
	rm->k.proto = p->proto;
	return drift_pick(rm, p->tcp_flags, len);
}

/* drift_pick for an IPv6 packet p6 to an IPv6 EIP. */
__noinline __u64 drift6(const struct pkt6 *p6, __u64 len)
{
	struct drift_room *rm = EDGE_ROOM(drift);
	if (!p6 || !rm)
		return 0;
	__builtin_memset(&rm->ek, 0, sizeof(rm->ek));
	rm->ek.addr = p6->daddr;
	rm->ek.family = AF_INET6_;
	rm->k.eip = p6->daddr;
	rm->k.client = p6->saddr;
	rm->k.ports = p6->p.ports;
	rm->k.family = AF_INET6_;
	rm->k.proto = p6->p.proto;
	rm->k.pad[0] = rm->k.pad[1] = 0;
	return drift_pick(rm, p6->p.tcp_flags, len);
}

/* The other way (host -> Internet): a TCP SYN without ACK that a
 * drifting EIP's live host sent (a connection its guest opens, whose
 * SYN-ACK and later segments come back to the EIP) records its flow as
 * the Internet side's SYN does, keyed the Internet side's way (rm->k
 * with the client's address and ports, filled by the callers). */
static __always_inline void drift_out(struct drift_room *rm, __be32 host, __u32 vsid, __u8 tcp_flags, __u64 len)
{
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &rm->ek);
	if (!r || !(r->flags & ROUTE_F_DRIFT) || rm->k.proto != IPPROTO_TCP_ ||
	    (tcp_flags & (TCP_SYN_ | TCP_ACK_)) != TCP_SYN_ || r->host.a[0] != host || r->vsid != vsid)
		return;
	__be32 live = host;
	if (bpf_map_update_elem(&drift_flows, &rm->k, &live, BPF_ANY))
		stat_add(STAT_DRIFT_FLOW_FAIL, len);
	else
		stat_add(STAT_DRIFT_FLOW_NEW, len);
}

/* drift_out for an IPv4 packet from eip to client (ports as on the
 * wire), hv the sending host | its VSID << 32, pf the protocol | the TCP
 * flags << 8 | the frame's length << 16. Scalars: a pointer to edge_from_host's
 * packet would keep it on xdp_edge's stack (32 bytes more, past the 512
 * of the deepest call chain). */
__noinline int drift_out4(__be32 eip, __be32 client, __be32 ports, __u64 hv, __u64 pf)
{
	struct drift_room *rm = EDGE_ROOM(drift);
	if (!rm)
		return 0;
	eip_key4(&rm->ek, eip);
	__builtin_memset(&rm->k, 0, sizeof(rm->k));
	rm->k.eip.a[0] = eip;
	rm->k.client.a[0] = client;
	rm->k.ports = ports_of(ports_dport(ports), ports_sport(ports));
	rm->k.family = AF_INET_;
	rm->k.proto = pf & 0xff;
	drift_out(rm, (__u32)hv, hv >> 32, (pf >> 8) & 0xff, pf >> 16);
	return 0;
}

/* drift_out for an IPv6 packet p6 from host. */
__noinline int drift_out6(const struct pkt6 *p6, __be32 host, __u32 vsid, __u64 len)
{
	struct drift_room *rm = EDGE_ROOM(drift);
	if (!p6 || !rm)
		return 0;
	__builtin_memset(&rm->ek, 0, sizeof(rm->ek));
	rm->ek.addr = p6->saddr;
	rm->ek.family = AF_INET6_;
	rm->k.eip = p6->saddr;
	rm->k.client = p6->daddr;
	rm->k.ports = ports_of(pkt_dport(&p6->p), pkt_sport(&p6->p));
	rm->k.family = AF_INET6_;
	rm->k.proto = p6->p.proto;
	rm->k.pad[0] = rm->k.pad[1] = 0;
	drift_out(rm, host, vsid, p6->p.tcp_flags, len);
	return 0;
}

/* Internet -> host: encapsulate toward the EIP's host (or, for a
 * drifting EIP's flow open at the move, its previous host: drift4). */
static __always_inline int edge_to_host(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg,
					 struct bpf_fib_lookup *fib, const struct eip_centry *r, __u64 len)
{
	__u8 imac[ETH_ALEN_] = {0x02, 0x00};
	__builtin_memcpy(&imac[2], &p->daddr, 4);
	__u32 key = (r->vsid << 8) | (flow_hash4(p->saddr, p->daddr, p->ports, p->proto, cfg->hash_seed) & 0xff);
	__be32 host = r->host;
	if (r->flags & ROUTE_F_DRIFT) {
		__u64 pv = drift4(p, len);
		if (pv) {
			host = (__be32)pv;
			key = (pv >> 32) << 8 | (key & 0xff);
		}
	}
	__u32 idx = r->stats_idx;
	__u16 ip_len = p->ip_len;
	/* tcp_flags is 0 for anything but TCP (parse.h). */
	__u8 syn = (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	int sent;
	int act = tunnel(ctx, p, cfg, fib, host, key, imac, STAT_ENCAP_TX, idx, len, &sent);
	if (sent) {
		struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
		if (es) {
			es->rx_packets++;
			es->rx_bytes += ip_len;
			es->rx_syns += syn;
		}
	}
	return act;
}

/* Routing a packet the edge translates (nat mode), in two halves. The
 * first resolves the next hop (of the flow: ports as they will leave, fh a
 * hash of the flow for ECMP) before the packet changes, so an ICMP error
 * about it quotes what the sender sent: it returns ROUTE_ON (fib holds the
 * next hop), ROUTE_KERNEL (no neighbour yet: the kernel will forward it
 * and resolve one), ROUTE_LOCAL or the XDP action already decided (TTL
 * expired, too big, no route). */
#define ROUTE_ON (-1)
#define ROUTE_KERNEL (-2)
#define ROUTE_LOCAL (-3) /* dst is an address of this node: not forwarded */

static __always_inline int route_prepare(struct xdp_md *ctx, struct pkt *p, const struct edge_config *cfg,
					 struct bpf_fib_lookup *fib, __be32 dst, __be32 ports, __u32 fh, __u64 len)
{
	int rc = fib4f(ctx, fib, cfg->nh_gen, p->saddr, dst, p->ip_len, p->proto, p->tos, ports, fh);
	if (rc == BPF_FIB_LKUP_RET_NOT_FWDED)
		return ROUTE_LOCAL;
	if (p->ttl <= 1)
		return ttl_expired(ctx, p, cfg, len);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return too_big(ctx, p, cfg, fib->mtu_result, len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return ROUTE_KERNEL;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count_drop(ctx, fib_reason(rc), len);
	return ROUTE_ON;
}

/* The second half, after the translation: TTL, MACs, transmit. */
static __always_inline int route_finish(struct xdp_md *ctx, struct pkt *p, struct bpf_fib_lookup *fib, int how,
					__u32 stat, __u64 len)
{
	if (how == ROUTE_KERNEL) {
		/* The frame is still addressed to us: the kernel routes it
		 * (and resolves the next hop, so the next packet is ours). */
		count_pass(ctx, STAT_LB_NAT_PASS, len);
		return XDP_PASS;
	}
	/* VLAN tags of the ingress link mean nothing on the egress one: the
	 * frame leaves untagged, as the tunnel paths' frames do. */
	__u32 tags = OFF(p->l3_off) - sizeof(struct ethhdr);
	if (tags && bpf_xdp_adjust_head(ctx, (int)tags))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end)
		return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
	ipv4_dec_ttl(iph);
	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN_);
	eth->h_proto = bpf_htons(ETH_P_IP_);
	count_out(ctx, stat, len);
	return xmit(ctx, fib->ifindex);
}

/* Internet -> a VIP: the load balancer. A global (separately verified)
 * function: the service paths would otherwise multiply the verifier's
 * states of the whole program. */
__noinline int lb_ingress(struct xdp_md *ctx, struct pkt *p, struct bpf_fib_lookup *fib, struct edge_config *cfg,
			  __u16 lgen)
{
	__u32 zero = 0;
	if (!ctx || !p || !fib || !cfg)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
	if (!lbc)
		return XDP_PASS;

	struct lb_flow f = {.client = p->saddr, .vip = p->daddr, .proto = p->proto, .tcp_flags = p->tcp_flags};
	if (p->proto == IPPROTO_ICMP_ && p->l4_ok) {
		/* An ICMP error about a flow to the VIP quotes VIP -> client. */
		struct icmphdr_ *ih = data + OFF(p->l4_off);
		if ((void *)(ih + 1) > data_end)
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		if (!icmp_is_error(ih->type))
			return count_drop(ctx, STAT_DROP_LB_NO_PORT, len);
		__be32 qs, qd;
		__be16 qsp, qdp;
		__u8 qp;
		if (icmp_quoted_flow(ih, data_end, p->ip_len - (p->l4_off - p->l3_off), &qs, &qd, &qsp, &qdp, &qp) || qs != p->daddr)
			return count_drop(ctx, STAT_DROP_LB_NO_PORT, len);
		f.client = qd;
		f.proto = qp;
		f.cport = qdp;
		f.vport = qsp;
		f.icmp = 1;
	} else {
		f.cport = pkt_sport(p);
		f.vport = pkt_dport(p);
	}
	__u32 idx;
	__u8 fid = 0;
	int nolst;
	struct lb_backend *bp = lb_decide(lbc, &f, lgen, cfg->hash_seed, &idx, &fid, &nolst);
	if (!bp)
		return count_drop(ctx, nolst ? STAT_DROP_LB_NO_PORT : STAT_DROP_LB_NO_BACKEND, len);
	__u16 ip_len = p->ip_len;
	__u32 stat = f.icmp ? STAT_LB_ICMP_TX : STAT_LB_ENCAP_TX;
	int act;

	__be32 baddr = bp->addr;
	__be16 bport = bp->port;
	/* The backend's mode: an established flow keeps the mode it started
	 * with even if its service changed since. */
	if (bp->mode == LB_MODE_ENCAP) {
		__u8 imac[ETH_ALEN_] = {SVC_MAC0, SVC_MAC1};
		__builtin_memcpy(&imac[2], &bp->guest, 4);
		int sent;
		/* FlowID: the flow hash's low byte, as for EIPs (the entry
		 * keeps it, so a hit computes no hash); an ICMP error about
		 * the flow gets the flow's. */
		act = tunnel(ctx, p, cfg, fib, baddr, (bp->vsid << 8) | fid, imac, stat, idx, len, &sent);
		if (sent)
			lb_count(&lb_be_stats, idx, ip_len, 0);
		return act;
	}

	/* nat: DNAT to the backend (and, for an ICMP error, its quote). */
	__be32 oports = f.icmp ? 0 : ports_of(f.cport, bport ? bport : f.vport);
	int how = route_prepare(ctx, p, cfg, fib, baddr, oports, fid, len);
	if (how == ROUTE_LOCAL)
		return count_drop(ctx, STAT_DROP_FIB, len); /* a backend address of our own */
	if (how != ROUTE_ON && how != ROUTE_KERNEL)
		return how;
	if (nat4(data, data_end, p, 1, baddr))
		return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
	if (bport) {
		if (f.icmp) {
			if (nat_icmp_quote_port(data + OFF(p->l4_off), data_end, 0, f.vport, bport))
				return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		} else if (nat4_port(data, data_end, p, 1, bport)) {
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		}
	}
	act = route_finish(ctx, p, fib, how, f.icmp ? STAT_LB_ICMP_TX : STAT_LB_NAT_TX, len);
	if (act == XDP_TX || act == XDP_REDIRECT)
		lb_count(&lb_be_stats, idx, ip_len, 0);
	return act;
}

/* lb_nat_reverse's answer for a packet that is no nat reply. */
#define NAT_NOT_OURS (-1)

/* The stateless fallback of the reply path: the VIP and port the plan
 * gives backend k (lb_nat_backends), as NAT_FB_HIT | vport << 32 | vip,
 * or 0. Global (verified once, on its own) and returning in a register:
 * the reply path is at the verifier's stack and instruction budgets. */
#define NAT_FB_HIT (1ULL << 48)
__noinline __u64 nat_reply_fallback(const struct nat_rkey *k)
{
	if (!k)
		return 0;
	struct nat_bkey bk = {.baddr = k->baddr, .bport = k->bport, .proto = k->proto};
	struct nat_rentry *v = bpf_map_lookup_elem(&lb_nat_backends, &bk);
	if (!v)
		return 0;
	return NAT_FB_HIT | ((__u64)v->vport << 32) | v->vip;
}

/* A reply translated by the fallback: counted, and its connection's
 * reverse entry installed (unless the synced one arrived meanwhile), so
 * later packets take the stateful path. The entry says no more than the
 * plan does (this backend port answers for this VIP and port only); only
 * after the anti-spoofing check, so forged sources cannot fill the LRU. */
__noinline int nat_reply_learn(const struct nat_rkey *k, __u32 vip, __u32 vport)
{
	if (!k)
		return 0;
	info_inc(LBI_NAT_REPLY_STATELESS);
	struct nat_rentry rv = {.vip = vip, .vport = (__be16)vport};
	bpf_map_update_elem(&lb_nat_conns, k, &rv, BPF_NOEXIST);
	return 0;
}

/* A reply of a nat-mode connection, or an ICMP error about one (from its
 * backend, or a router between the edge and it): SNAT back to the VIP and
 * port the connection's entry installed (lb_nat_conns), the error's quote
 * included. No entry (a backend's own connection, anything else): not
 * ours, the kernel gets it untouched. Only from the side the backend
 * really is on (the route to the sender leaves through the interface the
 * reply came in on): from anywhere else a forged backend source would be
 * reflected out with the VIP's. Inlined: as a global function its call
 * cost the reply path about 7 ns. Later fragments carry no ports: only the
 * first fragment of a reply is translated. */
static __always_inline int lb_nat_reverse(struct xdp_md *ctx, struct pkt *p, struct bpf_fib_lookup *fib, struct edge_config *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	if (!p->l4_ok)
		return NAT_NOT_OURS;
	struct nat_rkey k = {.proto = p->proto};
	__be32 ports = p->ports;
	int icmp = 0;
	if (p->proto == IPPROTO_ICMP_) {
		struct icmphdr_ *ih = data + OFF(p->l4_off);
		if ((void *)(ih + 1) > data_end || !icmp_is_error(ih->type))
			return NAT_NOT_OURS;
		__be32 qs, qd;
		__be16 qsp, qdp;
		__u8 qp;
		if (icmp_quoted_flow(ih, data_end, p->ip_len - (p->l4_off - p->l3_off), &qs, &qd, &qsp, &qdp, &qp))
			return NAT_NOT_OURS;
		/* The quote is what the backend got (client -> backend), and
		 * the error goes to that client. */
		if (qs != p->daddr)
			return NAT_NOT_OURS;
		k.baddr = qd;
		k.caddr = qs;
		k.bport = qdp;
		k.cport = qsp;
		k.proto = qp;
		icmp = 1;
	} else {
		/* The parser leaves a first fragment's ports out (every
		 * fragment of a datagram hashes alike); a reply's first
		 * fragment is translated by them too. */
		if (p->frag && (p->proto == IPPROTO_TCP_ || p->proto == IPPROTO_UDP_)) {
			__be32 *pp = data + OFF(p->l4_off);
			if ((void *)(pp + 1) > data_end)
				return NAT_NOT_OURS;
			ports = *pp;
		}
		k.baddr = p->saddr;
		k.caddr = p->daddr;
		k.bport = ports_sport(ports);
		k.cport = ports_dport(ports);
	}
	/* The connection's entry is authoritative; without one (its SYN
	 * went to another member of the set, whose entry has not synced
	 * yet), the backend's one VIP and port if the plan gives it one.
	 * Both in one word (NAT_FB_HIT: from the fallback), as the VIP and
	 * port of an entry were in one pointer: no stack to spare here. */
	__u64 rv;
	struct nat_rentry *r = bpf_map_lookup_elem(&lb_nat_conns, &k);
	if (r) {
		rv = ((__u64)r->vport << 32) | r->vip;
	} else {
		/* Only a SYN-ACK: it is a reply whatever else the backend
		 * sends, so its own connections (and errors about them) still
		 * leave untranslated. */
		if (icmp || p->frag || p->proto != IPPROTO_TCP_ || (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) != (TCP_SYN_ | TCP_ACK_))
			return NAT_NOT_OURS;
		rv = nat_reply_fallback(&k);
		if (!rv)
			return NAT_NOT_OURS;
	}
#define vip ((__be32)rv)
#define vport ((__be16)(rv >> 32))

	int rc = fib4c(ctx, fib, cfg->nh_gen, p->daddr, p->saddr, 68, p->proto, 0);
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || fib->ifindex != ctx->ingress_ifindex)
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	if (ipv4_martian(p->daddr))
		return count_drop(ctx, STAT_DROP_BAD_DST, len);
	__be32 oports = icmp ? 0 : ports_with_sport(ports, vport);
	int how = route_prepare(ctx, p, cfg, fib, p->daddr, oports, p->saddr ^ p->daddr ^ ports, len);
	if (how == ROUTE_LOCAL) {
		/* To the edge itself (a health check's answer): not a reply
		 * to translate. */
		count_pass(ctx, STAT_PASS_NOT_OURS, len);
		return XDP_PASS;
	}
	if (how != ROUTE_ON && how != ROUTE_KERNEL)
		return how;
	if (rv & NAT_FB_HIT)
		nat_reply_learn(&k, vip, vport);
	if (icmp) {
		void *l4 = data + OFF(p->l4_off);
		/* From the backend: its address leaves as the VIP's (nat4
		 * fixes the quote's destination too); from a router on the
		 * way: only the quote is the connection's. */
		if (p->saddr == k.baddr) {
			if (nat4(data, data_end, p, 0, vip))
				return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		} else if (nat_icmp_quote(l4, data_end, 1, k.baddr, vip)) {
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		}
		if (k.bport != vport && nat_icmp_quote_port(l4, data_end, 1, k.bport, vport))
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
	} else {
		if (nat4(data, data_end, p, 0, vip))
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		if (k.bport != vport && nat4_port(data, data_end, p, 0, vport))
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		/* The backend ends the connection: so does its entry. */
		if (p->tcp_flags & (TCP_FIN_ | TCP_RST_)) {
			struct ct_key fk = {.src = k.caddr, .dst = vip, .sport = k.cport, .dport = vport, .proto = k.proto};
			struct ct_entry *e = bpf_map_lookup_elem(&lb_conns, &fk);
			if (e)
				e->state = CT_FIN;
		}
	}
	return route_finish(ctx, p, fib, how, STAT_LB_REPLY_TX, len);
#undef vip
#undef vport
}

/* Whether a decapsulated packet from host (VIP -> client) belongs to a flow
 * the connection table, or else the VIP's table, gave to a backend on that
 * host in that VSID. */
static __always_inline int lb_reply_ok(const struct pkt *in, __be32 host, __u32 vsid)
{
	__u32 zero = 0;
	struct lb_flow f = {.client = in->daddr, .vip = in->saddr, .proto = in->proto, .tcp_flags = in->tcp_flags,
			    .cport = pkt_dport(in), .vport = pkt_sport(in)};
	struct ct_key k = {.src = f.client, .dst = f.vip, .sport = f.cport, .dport = f.vport, .proto = f.proto};
	struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
	struct ct_entry *e = bpf_map_lookup_elem(&lb_conns, &k);
	struct lb_backend *be = NULL;
	if (e && lbc) {
		__u32 i = e->backend;
		be = bpf_map_lookup_elem(&lb_backends, &i);
		__u32 now = (__u32)bpf_jiffies64();
		if (be && (be->gen != e->gen || (be->flags & LB_BE_DOWN) ||
			   (__u32)(now - e->last) > ct_timeout(lbc, e->state)))
			be = NULL; /* stale: the table decides, as for requests */
	}
	if (!be) {
		struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
		struct lb_listener *l = lb_listener_for(f.vip, f.proto, f.vport);
		if (!cfg || !l)
			return 0;
		__be32 ports = ports_of(f.cport, f.vport);
		long bi = lb_pick(l, flow_hash4(f.client, f.vip, ports, f.proto, cfg->hash_seed));
		if (bi < 0)
			return 0;
		__u32 i = bi;
		be = bpf_map_lookup_elem(&lb_backends, &i);
		e = NULL;
	}
	if (!be || be->mode != LB_MODE_ENCAP || be->addr != host || be->vsid != vsid)
		return 0;
	/* Only a genuine reply may move the connection's state. */
	if (e && (in->tcp_flags & (TCP_FIN_ | TCP_RST_)))
		e->state = CT_FIN;
	return 1;
}

/* lb6_ingress's answer for a flow given to a nat backend: not an XDP
 * action, lb6_entry calls lb6_nat_in (the backend in edge_rooms.lb6). */
#define LB6_NAT_IN 0x100

/* An ICMPv6 error about p6 (icmp6_error, lib/icmp.h: what is ICMP6_WHAT)
 * in place of the frame, counted: XDP_TX under icmp_ttl_tx or
 * icmp_frag_tx (the IPv4 errors' counters, as their budgets are), or a
 * drop under the reason icmp6_error gives (drop_icmp_limit over budget). */
static __always_inline int icmp6_answer(struct xdp_md *ctx, const struct pkt6 *p6, __u32 what, __u64 len)
{
	int st = icmp6_error(ctx, p6, what);
	if (st & ICMP6_SENT) {
		count_out(ctx, st & 0xffff, len);
		return XDP_TX;
	}
	return count_drop(ctx, st, len);
}

/* An ICMPv6 error (types 1-4) about a flow to an IPv6 VIP quotes VIP ->
 * client: a TCP or UDP packet from the VIP, its ports within the packet
 * (icmp6_quote_off). Writes that flow, the quote reversed (client -> VIP),
 * to edge_rooms.lb6's key for lb6_ingress, and returns 1; 0 for ICMPv6 that
 * is no such error. Global (verified on its own): lb6_ingress's packets
 * to a port pay one branch for it. */
__noinline int lb6_icmp_key(struct xdp_md *ctx)
{
	struct lb6_room *rm = ctx ? EDGE_ROOM(lb6) : NULL;
	if (!rm)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct pkt6 *p6 = &rm->p6;
	struct ct_key6 *k = &rm->keys.k;
	__u32 qoff = icmp6_quote_off(data, data_end, p6);
	struct ipv6hdr *q = data + OFF(qoff);
	__be16 *qp = data + OFF(qoff + 40);
	if (!qoff || (void *)(q + 1) > data_end || (void *)(qp + 2) > data_end)
		return 0;
	if (q->nexthdr != IPPROTO_TCP_ && q->nexthdr != IPPROTO_UDP_)
		return 0;
	if (q->saddr.in6_u.u6_addr32[0] != p6->daddr.a[0] || q->saddr.in6_u.u6_addr32[1] != p6->daddr.a[1] ||
	    q->saddr.in6_u.u6_addr32[2] != p6->daddr.a[2] || q->saddr.in6_u.u6_addr32[3] != p6->daddr.a[3])
		return 0;
	ip6w_copy(&k->src, &q->daddr);
	k->sport = qp[1];
	k->dport = qp[0];
	k->proto = q->nexthdr;
	return 1;
}

/* The second half of routing a translated IPv6 packet (route_finish's
 * twin): the VLAN tags dropped, the hop limit decremented, the next hop's
 * MACs, transmit, counted under stat. */
static __always_inline int route6_finish(struct xdp_md *ctx, const struct pkt *p, struct bpf_fib_lookup *fib,
					 __u32 stat, __u64 len)
{
	__u32 tags = OFF(p->l3_off) - sizeof(struct ethhdr);
	if (tags && bpf_xdp_adjust_head(ctx, (int)tags))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
	ip6->hop_limit--;
	mac_copy(eth->h_dest, fib->dmac);
	mac_copy(eth->h_source, fib->smac);
	eth->h_proto = bpf_htons(ETH_P_IPV6_);
	count_out(ctx, stat, len);
	return xmit(ctx, fib->ifindex);
}

/* The drop reason of a failed nat6 or lb_nat6_quote. */
static __always_inline __u32 lb_nat6_reason(int rc)
{
	return rc == LB_NAT6_UDP_CSUM0 ? STAT_DROP_IP6_UDP_CSUM0 : STAT_DROP_L4_TRUNC;
}

/* Internet -> an IPv6 VIP, nat mode (lb6_ingress's LB6_NAT_IN: its nat
 * backend in edge_rooms.lb6, the slot idx, its port nat_bport, 0: the
 * listener's, nat_fp the flow's FlowID | LB_PF_ICMP for an ICMPv6 error
 * about the flow): DNAT66 to the backend's address
 * (its slot's, lb6_nat_addr) and port, routed by the FIB (AF_INET6) as lb_ingress
 * routes an IPv4 nat flow: an address of our own drop_fib, an expired hop
 * limit and a packet too big for the route answered with ICMPv6 (or
 * dropped) as on the encap path, no neighbour yet: translated and passed
 * to the kernel (lb_nat_pass); else sent under lb_nat_tx (an ICMPv6 error:
 * lb_icmp_tx, its quote's source and port translated too). A UDP datagram
 * with a zero checksum (invalid in IPv6) is dropped, drop_ip6_udp_csum0.
 * The connection's reverse entry (lb_nat_conns6) was made by lb_decide6.
 * Global, called from xdp_edge's frame (lb6_entry). */
__noinline int lb6_nat_in(struct xdp_md *ctx)
{
	if (!ctx)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0;
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	/* The lb6 and fib rooms from one lookup. */
	struct edge_rooms *rooms = bpf_map_lookup_elem(&edge_rooms, &zero);
	if (!cfg || !rooms)
		return XDP_PASS;
	struct lb6_room *rm = &rooms->lb6;
	__u32 idx = rm->idx;
	__u32 bport = rm->nat_bport;
	__u32 fp = rm->nat_fp;
	struct nat_rentry6 *bs = lb6_nat_addr(&rm->keys, idx);
	if (!bs)
		return count_drop(ctx, STAT_DROP_LB_NO_BACKEND, len);
	const struct ip_addr *ba = &bs->vip;
	const struct pkt6 *p6 = &rm->p6;
	struct ct_key6 *k = &rm->keys.k;
	int icmp = fp & LB_PF_ICMP;
	__be16 vport = k->dport;
	__be16 bp = bport ? (__be16)bport : vport;
	__u32 qoff = 0;
	if (icmp) {
		qoff = icmp6_quote_off(data, data_end, p6);
		if (!qoff)
			return count_drop(ctx, STAT_DROP_LB_NO_PORT, len);
	}
	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&rooms->fib;
	__u16 ip_len = p6->p.ip_len;
	int rc = fib6f(ctx, fib, cfg->nh_gen, &p6->saddr, ba, ip_len, p6->p.proto, 0,
		       icmp ? 0 : ports_of(k->sport, bp), fp & 0xff);
	if (rc == BPF_FIB_LKUP_RET_NOT_FWDED)
		return count_drop(ctx, STAT_DROP_FIB, len); /* a backend address of our own */
	if (p6->p.ttl <= 1)
		return icmp6_answer(ctx, p6,
				    ICMP6_WHAT(ICMP_KIND_TTL, 0) | ((cfg->flags & CFG_F_ICMP_TTL) ? ICMP6_F_TTL_ON : 0), len);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return icmp6_answer(ctx, p6, ICMP6_WHAT(ICMP_KIND_FRAG, fib->mtu_result), len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(ctx, fib_reason(rc), len);
	int nr = lb_nat6(data, data_end, p6, 1, ba);
	if (!nr && icmp)
		nr = lb_nat6_quote(data, data_end, p6, qoff, 0, &p6->daddr, ba, vport, bp);
	else if (!nr && bp != vport && nat4_port(data, data_end, &p6->p, 1, bp))
		nr = -1;
	if (nr)
		return count_drop(ctx, lb_nat6_reason(nr), len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		count_pass(ctx, STAT_LB_NAT_PASS, len);
		return XDP_PASS;
	}
	int act = route6_finish(ctx, &p6->p, fib, icmp ? STAT_LB_ICMP_TX : STAT_LB_NAT_TX, len);
	if (act == XDP_TX || act == XDP_REDIRECT)
		lb_count(&lb_be_stats, idx, ip_len, 0);
	return act;
}

/* Internet -> an IPv6 VIP (issue 21): the load balancer for IPv6 flows,
 * lb_ingress's encap path, for the packet edge_ipv6 checked (firewall,
 * anti-spoofing, limits) and left in edge_rooms.lb6, lgen the VIP's listener
 * generation. The listener (VIP, protocol, port: exact, then ranges, then
 * any port) and the connection in lb_conns6 (lb_decide6), the backend from
 * the shared Maglev tables and slots; a flow without a listener
 * drop_lb_no_port, without a usable backend drop_lb_no_backend (a nat
 * backend too: an IPv6 VIP is encap only). The packet is encapsulated as
 * edge_ipv6 encapsulates an IPv6 EIP's (outer IPv4 to the backend's host,
 * key VSID << 8 | the flow's FlowID, outer TOS the traffic class, hop
 * limit decremented), the inner destination MAC SVC_MAC0, SVC_MAC1 and the
 * guest's IPv4 private address as for an IPv4 VIP, inner ethertype IPv6:
 * lb_encap_tx and the backend's lb_be_stats. An expired hop limit and a
 * packet too big for the tunnel get ICMPv6 time exceeded and packet too
 * big as on the IPv6 EIP path (icmp6_answer). An ICMPv6 error (types
 * 1-4) about a flow of the VIP follows the flow, as lb_ingress steers an
 * IPv4 VIP's ICMP errors: the flow is its quote reversed (lb6_icmp_key),
 * its entry or else the VIP's table gives the backend (no entry is made,
 * no state moved), and the error is encapsulated as the flow's packets
 * are (the flow's FlowID), counted under lb_icmp_tx; the agent translates
 * the quote (agent_quote6). Other ICMPv6 to a VIP, and an error whose
 * quote is no TCP or UDP packet from the VIP with its ports, has no
 * listener: drop_lb_no_port. A global function called from xdp_edge's
 * frame (entry.h, FRAME_VIP6): under ipv6_frame's, the three frames would
 * pass 512 bytes. */
__noinline int lb6_ingress(struct xdp_md *ctx, __u32 lgen)
{
	if (!ctx)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0;
	struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	/* The lb6 and fib rooms from one lookup. */
	struct edge_rooms *rooms = bpf_map_lookup_elem(&edge_rooms, &zero);
	if (!lbc || !cfg || !rooms)
		return XDP_PASS;
	struct lb6_room *rm = &rooms->lb6;
	struct pkt6 *p6 = &rm->p6;
	struct lb6_keys *ks = &rm->keys;
	ip6w_copy(&ks->k.src, &p6->saddr);
	ip6w_copy(&ks->k.dst, &p6->daddr);
	ks->k.sport = pkt_sport(&p6->p);
	ks->k.dport = pkt_dport(&p6->p);
	ks->k.proto = p6->p.proto;
	ks->k.pad[0] = ks->k.pad[1] = ks->k.pad[2] = 0;
	__u32 pflags = p6->p.tcp_flags;
	if (p6->p.proto == IPPROTO_ICMPV6_) {
		if (!lb6_icmp_key(ctx))
			return count_drop(ctx, STAT_DROP_LB_NO_PORT, len);
		pflags = LB_PF_ICMP;
	}
	__u32 idx = 0;
	__u8 fid = 0;
	int nolst;
	struct lb_backend *be =
		lb_decide6(lbc, ks, pflags, (__u16)lgen, cfg->hash_seed, &idx, &fid, &nolst);
	if (!be)
		return count_drop(ctx, nolst ? STAT_DROP_LB_NO_PORT : STAT_DROP_LB_NO_BACKEND, len);
	if (be->mode == LB_MODE_NAT) {
		rm->idx = idx;
		rm->nat_bport = be->port;
		rm->nat_fp = (pflags & LB_PF_ICMP) | fid;
		return LB6_NAT_IN;
	}
	if (be->mode != LB_MODE_ENCAP)
		return count_drop(ctx, STAT_DROP_LB_NO_BACKEND, len);
	if (p6->p.ttl <= 1)
		return icmp6_answer(ctx, p6,
				    ICMP6_WHAT(ICMP_KIND_TTL, 0) | ((cfg->flags & CFG_F_ICMP_TTL) ? ICMP6_F_TTL_ON : 0), len);
	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&rooms->fib;
	__be32 host = be->addr;
	__be32 guest = be->guest;
	__u32 key = (be->vsid << 8) | fid;
	__be32 ul = cfg->underlay.a[0];
	__u16 ip_len = p6->p.ip_len;
	__u32 l3_off = p6->p.l3_off;
	int rc = fib4f(ctx, fib, cfg->nh_gen, ul, host, ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0, bpf_htons(fid), fid);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* The largest inner packet the tunnel carries (icmp6_error
		 * sends none below 1280). */
		__u32 mtu = fib->mtu_result > NVGRE_OVERHEAD ? fib->mtu_result - NVGRE_OVERHEAD : 0;
		return icmp6_answer(ctx, p6, ICMP6_WHAT(ICMP_KIND_FRAG, mtu), len);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		if (rc == FIB_RET_UL6) {
			/* Inner MAC SVC_MAC0, SVC_MAC1 and the guest's address; the
			 * packet is in edge_rooms.lb6 already. */
			if (ul6_ask(&p6->p, host, key,
				    SVC_MAC0 | SVC_MAC1 << 8 | (__u64)guest << 16 | UL6_INNER6 |
					    (__u64)((pflags & LB_PF_ICMP) ? STAT_LB_ICMP_TX : STAT_LB_ENCAP_TX) << 56,
				    idx) != UL6_DEFER)
				return XDP_ABORTED;
			return FRAME_UL6;
		}
		return count_drop(ctx, fib_reason(rc), len);
	}
	struct ipv6hdr *ip6 = data + OFF(l3_off);
	if ((void *)(ip6 + 1) > data_end)
		return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
	ip6->hop_limit--;
	if (nvgre_to_w(ctx, l3_off, ip_len, p6->p.tos, fib, ul, host, key, cfg->gw_mac, cfg->gw_mac))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *ieth = data + ETH_HLEN_ + sizeof(struct iphdr) + GRE_HLEN_KEY;
	if ((void *)(ieth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	ieth->h_dest[0] = SVC_MAC0;
	ieth->h_dest[1] = SVC_MAC1;
	__builtin_memcpy(&ieth->h_dest[2], &guest, 4);
	ieth->h_proto = bpf_htons(ETH_P_IPV6_);
	lb_count(&lb_be_stats, idx, ip_len, 0);
	count_out(ctx, (pflags & LB_PF_ICMP) ? STAT_LB_ICMP_TX : STAT_LB_ENCAP_TX, len);
	return xmit(ctx, fib->ifindex);
}

/* lb_reply_ok for an IPv6 packet (VIP -> client) a host sent in NVGRE:
 * whether the connection (lb_conns6), or else the VIP's table, gives its
 * flow to an encap backend on that host in that VSID. Global: called from
 * edge_pull_failed, which has no stack to spare; the key is in
 * edge_rooms.lb6. */
__noinline int lb6_reply_ok(const struct pkt6 *in, __u32 host, __u32 vsid)
{
	__u32 zero = 0;
	struct lb6_room *room = EDGE_ROOM(lb6);
	if (!in || !room)
		return 0;
	struct lb6_keys *rm = &room->keys;
	ip6w_copy(&rm->k.src, &in->daddr);
	ip6w_copy(&rm->k.dst, &in->saddr);
	rm->k.sport = pkt_dport(&in->p);
	rm->k.dport = pkt_sport(&in->p);
	rm->k.proto = in->p.proto;
	rm->k.pad[0] = rm->k.pad[1] = rm->k.pad[2] = 0;
	room->host = host;
	room->vsid = vsid;
	room->fin = in->p.tcp_flags & (TCP_FIN_ | TCP_RST_);
	struct ct_entry *e = bpf_map_lookup_elem(&lb_conns6, &rm->k);
	struct lb_backend *be = NULL;
	if (e) {
		struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
		room->idx = e->backend;
		be = bpf_map_lookup_elem(&lb_backends, &room->idx);
		if (!lbc || (be && (be->gen != e->gen || (be->flags & LB_BE_DOWN) ||
				    (__u32)((__u32)bpf_jiffies64() - e->last) > ct_timeout(lbc, e->state))))
			be = NULL; /* stale: the table decides, as for requests */
	}
	if (!be) {
		e = NULL;
		struct lb_listener *l = lb_listener_for6(rm);
		struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
		if (!l || !cfg)
			return 0;
		long bi = lb_pick(l, flow_hash6(rm->k.src.a, rm->k.dst.a, ports_of(rm->k.sport, rm->k.dport), rm->k.proto,
						cfg->hash_seed));
		if (bi < 0)
			return 0;
		room->idx = bi;
		be = bpf_map_lookup_elem(&lb_backends, &room->idx);
	}
	if (!be || be->mode != LB_MODE_ENCAP || be->addr != room->host || be->vsid != room->vsid)
		return 0;
	/* Only a genuine reply may move the connection's state. */
	if (e && room->fin)
		e->state = CT_FIN;
	return 1;
}

/* lb_nat_reverse for IPv6 (issue 21): a reply of an IPv6 VIP's nat
 * connection, or an ICMPv6 error about one (from its backend or a router
 * between the edge and it), p6 the packet ipv6_frame parsed (to no IPv6
 * EIP or VIP). SNAT66 back to the VIP and port of the connection's entry
 * (lb_nat_conns6); without one, a SYN-ACK from a backend the plan gives
 * one VIP and port (lb_nat_backends6) is translated by it, counted
 * nat_reply_stateless, and its entry learnt (after the anti-spoofing
 * check, as nat_reply_learn does). Only from the side the backend is on
 * (the route to the sender leaves by the interface the reply came in
 * on): else drop_spoof. To the edge itself (ROUTE_LOCAL): passed, not
 * ours. The route to the client as lb6_nat_in's (hop limit, too big, no
 * neighbour), sent under lb_reply_tx. A backend's FIN or RST marks the
 * connection's entry (lb_conns6) CT_FIN. Anything else is not ours:
 * passed as ipv6_frame passes it (pass_ipv6). Returns the XDP action,
 * counted. Global, the packet and keys in edge_rooms.lb6, called from
 * xdp_edge's frame as lb6_ingress is (FRAME_NAT6: under ipv6_frame's
 * frame the stack passes 512 bytes); lb6_nat_rev is its body. */
static __always_inline int lb6_nat_rev(struct xdp_md *ctx, struct edge_rooms *rooms, const struct edge_config *cfg,
				       __u64 len)
{
	struct lb6_room *rm = &rooms->lb6;
	const struct pkt6 *p6 = &rm->p6;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nat_rkey6 *k = &rm->keys.nk;
	__be32 ports = p6->p.ports;
	__u32 qoff = 0;
	if (p6->p.proto == IPPROTO_ICMPV6_) {
		qoff = icmp6_quote_off(data, data_end, p6);
		struct ipv6hdr *q = data + OFF(qoff);
		__be16 *qp = data + OFF(qoff + 40);
		if (!qoff || (void *)(q + 1) > data_end || (void *)(qp + 2) > data_end)
			return NAT_NOT_OURS;
		if (q->nexthdr != IPPROTO_TCP_ && q->nexthdr != IPPROTO_UDP_)
			return NAT_NOT_OURS;
		/* The quote is what the backend got (client -> backend), and
		 * the error goes to that client. */
		if (q->saddr.in6_u.u6_addr32[0] != p6->daddr.a[0] || q->saddr.in6_u.u6_addr32[1] != p6->daddr.a[1] ||
		    q->saddr.in6_u.u6_addr32[2] != p6->daddr.a[2] || q->saddr.in6_u.u6_addr32[3] != p6->daddr.a[3])
			return NAT_NOT_OURS;
		ip6w_copy(&k->baddr, &q->daddr);
		ip6w_copy(&k->caddr, &q->saddr);
		k->bport = qp[1];
		k->cport = qp[0];
		k->proto = q->nexthdr;
	} else {
		if (p6->p.frag && (p6->p.proto == IPPROTO_TCP_ || p6->p.proto == IPPROTO_UDP_)) {
			/* A first fragment: the parser leaves its ports out. */
			__be32 *pp = data + OFF(p6->p.l4_off);
			if ((void *)(pp + 1) > data_end)
				return NAT_NOT_OURS;
			ports = *pp;
		}
		ip6w_copy(&k->baddr, &p6->saddr);
		ip6w_copy(&k->caddr, &p6->daddr);
		k->bport = ports_sport(ports);
		k->cport = ports_dport(ports);
		k->proto = p6->p.proto;
	}
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
	int fb = 0;
	struct nat_rentry6 *r = bpf_map_lookup_elem(&lb_nat_conns6, k);
	if (!r) {
		/* Only a SYN-ACK, as for IPv4. */
		if (qoff || p6->p.frag || p6->p.proto != IPPROTO_TCP_ ||
		    (p6->p.tcp_flags & (TCP_SYN_ | TCP_ACK_)) != (TCP_SYN_ | TCP_ACK_))
			return NAT_NOT_OURS;
		struct nat_bkey6 *bk = &rm->keys.nb;
		ip6w_copy(&bk->baddr, &k->baddr);
		bk->bport = k->bport;
		bk->proto = k->proto;
		bk->pad = 0;
		r = bpf_map_lookup_elem(&lb_nat_backends6, bk);
		if (!r)
			return NAT_NOT_OURS;
		fb = 1;
	}
	struct nat_rentry6 *v = &rm->keys.nv;
	__builtin_memcpy(v, r, sizeof(*v));

	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&rooms->fib;
	int rc = fib6f(ctx, fib, cfg->nh_gen, &p6->daddr, &p6->saddr, 40, p6->p.proto, 0, 0, 0);
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || fib->ifindex != ctx->ingress_ifindex)
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	__u16 ip_len = p6->p.ip_len;
	rc = fib6f(ctx, fib, cfg->nh_gen, &p6->saddr, &p6->daddr, ip_len, p6->p.proto, 0,
		   qoff ? 0 : ports_with_sport(ports, v->vport), p6->saddr.a[3] ^ p6->daddr.a[3] ^ ports);
	if (rc == BPF_FIB_LKUP_RET_NOT_FWDED) {
		/* To the edge itself: not a reply to translate. */
		count_pass(ctx, STAT_PASS_NOT_OURS, len);
		return XDP_PASS;
	}
	if (p6->p.ttl <= 1)
		return icmp6_answer(ctx, p6,
				    ICMP6_WHAT(ICMP_KIND_TTL, 0) | ((cfg->flags & CFG_F_ICMP_TTL) ? ICMP6_F_TTL_ON : 0), len);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return icmp6_answer(ctx, p6, ICMP6_WHAT(ICMP_KIND_FRAG, fib->mtu_result), len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(ctx, fib_reason(rc), len);
	if (p6->p.proto == IPPROTO_UDP_) {
		struct udphdr *uh = data + OFF(p6->p.l4_off);
		if ((void *)(uh + 1) > data_end)
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		if (!uh->check)
			return count_drop(ctx, STAT_DROP_IP6_UDP_CSUM0, len);
	}
	if (fb) {
		info_inc(LBI_NAT_REPLY_STATELESS);
		bpf_map_update_elem(&lb_nat_conns6, k, v, BPF_NOEXIST);
	}
	int nr = 0;
	if (qoff) {
		/* From the backend: its address leaves as the VIP's; from a
		 * router on the way: only the quote is the connection's. */
		if (p6->saddr.a[0] == k->baddr.a[0] && p6->saddr.a[1] == k->baddr.a[1] &&
		    p6->saddr.a[2] == k->baddr.a[2] && p6->saddr.a[3] == k->baddr.a[3])
			nr = lb_nat6(data, data_end, p6, 0, &v->vip);
		if (!nr)
			nr = lb_nat6_quote(data, data_end, p6, qoff, 1, &k->baddr, &v->vip, k->bport, v->vport);
	} else {
		nr = lb_nat6(data, data_end, p6, 0, &v->vip);
		if (!nr && k->bport != v->vport && nat4_port(data, data_end, &p6->p, 0, v->vport))
			nr = -1;
		if (!nr && (p6->p.tcp_flags & (TCP_FIN_ | TCP_RST_))) {
			/* The backend ends the connection: so does its entry. */
			struct ct_key6 *fk = &rm->keys.k;
			ip6w_copy(&fk->src, &k->caddr);
			ip6w_copy(&fk->dst, &v->vip);
			fk->sport = k->cport;
			fk->dport = v->vport;
			fk->proto = k->proto;
			fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
			struct ct_entry *e = bpf_map_lookup_elem(&lb_conns6, fk);
			if (e)
				e->state = CT_FIN;
		}
	}
	if (nr)
		return count_drop(ctx, lb_nat6_reason(nr), len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		count_pass(ctx, STAT_LB_NAT_PASS, len);
		return XDP_PASS;
	}
	return route6_finish(ctx, &p6->p, fib, STAT_LB_REPLY_TX, len);
}

__noinline int lb6_nat_reverse(struct xdp_md *ctx)
{
	__u32 zero = 0;
	if (!ctx)
		return XDP_ABORTED;
	__u64 len = ctx->data_end - ctx->data;
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	struct edge_rooms *rooms = bpf_map_lookup_elem(&edge_rooms, &zero);
	/* Nothing to HC6 outside the tunnel (lib/hc.h), first: lb6_nat_rev
	 * passes a packet to a local address up to the kernel itself (a
	 * nat backend's stateless SYN-ACK to HC6 went up so). */
	if (rooms && hc6_direct(&rooms->lb6.p6, len))
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	int act = cfg && rooms ? lb6_nat_rev(ctx, rooms, cfg, len) : NAT_NOT_OURS;
	if (act == NAT_NOT_OURS)
		return count_pass(ctx, STAT_PASS_IPV6, len);
	return act;
}

/* AZG_IPV6_VIP (entry.h), in xdp_edge's frame: arg is edge_ipv6's answer
 * without FRAME_VIP6, the VIP's listener generation or FRAME_NAT6. */
static __always_inline int lb6_entry(struct xdp_md *ctx, __u32 arg)
{
	if (arg & FRAME_NAT6)
		return lb6_nat_reverse(ctx);
	int act = lb6_ingress(ctx, arg);
	if (act == LB6_NAT_IN)
		return lb6_nat_in(ctx);
	return act;
}

/* Destinations a guest's IPv6 never leaves the region for (drop_bad_dst):
 * :: and ::1, multicast (ff00::/8), link-local (fe80::/10: the guest's
 * link only), IPv4-mapped (::ffff:0:0/96, a socket's notation, never on
 * a wire) and unique-local (fc00::/7, RFC 4193: never routed on the
 * Internet, and the ULA networks an edge reaches are the region's own).
 * What the FIB sends back into the underlay is refused after the lookup. */
static __always_inline int decap6_bad_dst(const struct ip_addr *a)
{
	__u32 a0 = bpf_ntohl(a->a[0]);
	if ((a0 >> 24) == 0xff || (a0 & 0xffc00000) == 0xfe800000 || (a0 & 0xfe000000) == 0xfc000000)
		return 1;
	if (a0 | a->a[1])
		return 0;
	__u32 a2 = bpf_ntohl(a->a[2]), a3 = bpf_ntohl(a->a[3]);
	return a2 == 0xffff || (!a2 && a3 <= 1);
}

/* edge_from_host's verdict on NVGRE nvgre_pull refused (reason, the frame
 * len bytes, the outer headers o as edge_from_host parsed them): every
 * reason but drop_inner_bad is counted as before; drop_inner_bad may be
 * an IPv6 guest's packet (nvgre_pull takes IPv4 only): the host -> Internet
 * path for IPv6 guests (docs/dataplane.md "IPv6 guests"; edge_decap6 in
 * `bench dataplane`). edge_from_host checked the outer headers (GRE to our
 * underlay address, from the underlay interface, GRE header exact); the
 * inner frame must be IPv6 (else drop_inner_bad, as before), parse as
 * parse_ipv6 says, have a source that is no martian and lie inside the
 * outer packet (drop_inner_bad); a destination decap6_bad_dst refuses is
 * drop_bad_dst; the inner source must be an IPv6 EIP whose route names
 * the outer source as its host, with the tunnel's VSID, or an IPv6 VIP
 * whose flow a guest of that host serves in that VSID (lb6_reply_ok;
 * counted as lb_reply_tx) (drop_spoof); a hop limit of 1 or 0 is drop_ttl
 * (no ICMPv6 time exceeded yet). Then the IPv6 FIB (fib6f, through
 * nh_cache6) from the underlay interface: too big for the route's MTU
 * drop_too_big (no ICMPv6 packet too big yet), no route drop_fib, a next
 * hop back into the underlay (the ingress or underlay interface)
 * drop_bad_dst; the outer headers are removed, the hop limit decremented
 * and the packet sent to the next hop (decap_tx), or, its neighbour
 * unresolved, handed to the kernel unchanged (decap_pass), which forwards
 * it and resolves the neighbour. The EIP's tx counters move as IPv4's do.
 * Returns the XDP action, counted. A global function called where
 * edge_from_host counted the drop (the outer struct pkt by pointer: as
 * values, the arguments changed the IPv4 code): the IPv4 paths' stack,
 * states and instructions are as they were. */
__noinline int edge_pull_failed(struct xdp_md *ctx, __u32 reason, __u64 len, const struct pkt *o)
{
	if (!ctx || !o)
		return XDP_ABORTED;
	if (reason != STAT_DROP_INNER_BAD)
		goto drop;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;

	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	/* The fib and e6 rooms from one lookup of edge_rooms. */
	struct edge_rooms *rooms = bpf_map_lookup_elem(&edge_rooms, &zero);
	if (!cfg || !rooms)
		return XDP_PASS;
	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&rooms->fib;
	struct edge_room6 *room = &rooms->e6;
	struct pkt6 *p6 = &room->p6;
	__be32 host = o->saddr;
	__u32 outer_end = o->l3_off + o->ip_len;
	__u32 l4_off = o->l4_off;
	/* (The inner Ethernet header from the GRE header's pointer: one
	 * bounds check covers both.) */
	struct gre_key_hdr *gre = data + OFF(l4_off);
	struct ethhdr *ieth = (void *)(gre + 1);
	if ((void *)(ieth + 1) > data_end || ieth->h_proto != bpf_htons(ETH_P_IPV6_))
		goto drop;
	__u32 vsid = bpf_ntohl(gre->key) >> 8;
	p6->p.l3_off = OFF(l4_off + GRE_HLEN_KEY) + ETH_HLEN_;
	if (parse_ipv6_room(data, data_end, p6) || ipv6_martian_src(p6))
		goto drop;
	if (p6->p.l3_off + p6->p.ip_len > outer_end)
		goto drop;
	reason = STAT_DROP_BAD_DST;
	if (decap6_bad_dst(&p6->daddr))
		goto drop;

	struct eip_key *k = &room->k;
	ip6w_copy(&k->addr, &p6->saddr);
	k->family = AF_INET6_;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, k);
	reason = STAT_DROP_SPOOF;
	/* Not from an IPv6 EIP or VIP: a guest's answer to this edge's IPv6
	 * health check (lib/hc.h hc6_reply), or spoofed (drop_spoof). */
	if (!r)
		return hc6_reply(ctx, host, vsid);
	/* An IPv6 VIP's reply: from a host whose guest serves its flow (the
	 * IPv4 VIPs' rule, lb6_reply_ok); counted as lb_reply_tx, no EIP's
	 * counters. */
	__u32 out = STAT_DECAP_TX;
	__u32 idx = r->stats_idx;
	if (r->flags & (ROUTE_F_VIP | ROUTE_F_DRIFT)) {
		if (r->flags & ROUTE_F_VIP) {
			if (!lb6_reply_ok(p6, host, vsid))
				goto drop;
			out = STAT_LB_REPLY_TX;
		} else if (r->family != AF_INET_) {
			goto drop;
		} else if (r->host.a[0] == host && r->vsid == vsid) {
			drift_out6(p6, host, vsid, len);
		} else if (!drift_from(k, host, vsid)) {
			/* (A drifting EIP's previous host may send its
			 * replies.) */
			goto drop;
		}
	} else if (r->family != AF_INET_ || r->host.a[0] != host || r->vsid != vsid) {
		goto drop;
	}
	reason = STAT_DROP_TTL;
	if (p6->p.ttl <= 1)
		goto drop;

	struct ipv6hdr *ip6 = data + OFF(p6->p.l3_off);
	reason = STAT_DROP_INNER_BAD;
	if ((void *)(ip6 + 1) > data_end)
		goto drop;
	__be32 flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
	int rc = fib6f(ctx, fib, cfg->nh_gen, &p6->saddr, &p6->daddr, p6->p.ip_len, p6->p.proto, flowinfo, p6->p.ports,
		       ip6w_xor2(&p6->saddr, &p6->daddr) ^ p6->p.ports ^ flowinfo);
	reason = STAT_DROP_TOO_BIG;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		goto drop;
	reason = STAT_DROP_FIB;
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		goto drop;
	/* A guest must not reach the underlay through the edge (the lookup
	 * names the egress interface with NO_NEIGH too). */
	reason = STAT_DROP_BAD_DST;
	if (fib->ifindex == ctx->ingress_ifindex || fib->ifindex == cfg->ul_ifindex)
		goto drop;

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ip6 = data + OFF(p6->p.l3_off);
	struct ethhdr *oeth = data;
	reason = STAT_DROP_INNER_BAD;
	if ((void *)(oeth + 1) > data_end || (void *)(ip6 + 1) > data_end)
		goto drop;
	mac2_copy(room->ours, oeth->h_dest); /* and room->peer, oeth->h_source */
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		ip6->hop_limit--;
	reason = STAT_DROP_HEADROOM;
	if (nvgre_strip(ctx, &p6->p))
		goto drop;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		goto drop;

	if (out == STAT_DECAP_TX) {
		struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
		if (es) {
			es->tx_packets++;
			es->tx_bytes += p6->p.ip_len;
		}
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* Let the kernel forward this one and resolve the neighbour. */
		mac2_copy(eth->h_dest, room->ours); /* and h_source, room->peer */
		return count_pass(ctx, STAT_DECAP_PASS, len);
	}
	mac_copy(eth->h_dest, fib->dmac);
	mac_copy(eth->h_source, fib->smac);
	count_out(ctx, out, len);
	return xmit(ctx, fib->ifindex);
drop:
	return count_drop(ctx, reason, len);
}

/* Host -> Internet: decapsulate NVGRE from an AZ host. */
static __always_inline int edge_from_host(struct xdp_md *ctx, struct pkt *o, const struct edge_config *cfg,
					   struct bpf_fib_lookup *fibp, __u64 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt in;
	__u32 vsid;
	int rc;

	/* NVGRE is only taken from the underlay: from the Internet side a
	 * forged host address must not get a packet past anti-spoofing. */
	if (cfg->ul_ifindex && ctx->ingress_ifindex != cfg->ul_ifindex)
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	rc = nvgre_pull(data, data_end, o, &in, &vsid);
	if (rc) {
		/* (Constants, not rc: clang merged a "return rc" with the
		 * IPv4 paths' redirect tail, one more jump on edge_decap's
		 * path; entry.h does the same.) */
		rc = edge_pull_failed(ctx, rc, len, o);
		if (rc == XDP_REDIRECT)
			return XDP_REDIRECT;
		if (rc == XDP_TX)
			return XDP_TX;
		return rc == XDP_PASS ? XDP_PASS : XDP_DROP;
	}
	if (ipv4_martian(in.daddr))
		return count_drop(ctx, STAT_DROP_BAD_DST, len);

	struct eip_key k;
	eip_key4(&k, in.saddr);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	__u32 idx = 0;
	__u32 out_stat = STAT_DECAP_TX;
	if (!r) {
		/* Not from an EIP or VIP: a guest's answer to this edge's
		 * health check (lib/hc.h), or spoofed. */
		__be32 hc = hc_addr();
		if (hc && in.daddr == hc)
			return hc_reply(ctx, o->saddr, in.saddr, vsid, in.l3_off << 16 | in.ip_len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	if (r->flags & ROUTE_F_VIP) {
		if (!lb_reply_ok(&in, o->saddr, vsid))
			return count_drop(ctx, STAT_DROP_SPOOF, len);
		out_stat = STAT_LB_REPLY_TX;
		r = NULL;
	} else {
		/* The host the route names, or a drifting EIP's previous
		 * host (its connections open at the move: drift_pick). */
		if ((r->host.a[0] != o->saddr || r->vsid != vsid) &&
		    !((r->flags & ROUTE_F_DRIFT) && drift_from4(in.saddr, o->saddr, vsid)))
			return count_drop(ctx, STAT_DROP_SPOOF, len);
		idx = r->stats_idx;
		if (r->flags & ROUTE_F_DRIFT)
			drift_out4(in.saddr, in.daddr, in.ports, o->saddr | (__u64)vsid << 32,
				   in.proto | (__u32)in.tcp_flags << 8 | len << 16);
	}
	if (in.ttl <= 1)
		return count_drop(ctx, STAT_DROP_TTL, len);

	rc = fib4f(ctx, fibp, cfg->nh_gen, in.saddr, in.daddr, in.ip_len, in.proto, in.tos, in.ports,
		   in.saddr ^ in.daddr ^ in.ports);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return count_drop(ctx, STAT_DROP_TOO_BIG, len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(ctx, STAT_DROP_FIB, len);
	/* A guest must not reach the underlay through the edge (the lookup
	 * names the egress interface with NO_NEIGH too). */
	if (fibp->ifindex == ctx->ingress_ifindex || fibp->ifindex == cfg->ul_ifindex)
		return count_drop(ctx, STAT_DROP_BAD_DST, len);

	__u16 ip_len = in.ip_len;
	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	__u8 ours[ETH_ALEN_], peer[ETH_ALEN_];
	__builtin_memcpy(ours, oeth->h_dest, ETH_ALEN_);
	__builtin_memcpy(peer, oeth->h_source, ETH_ALEN_);

	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		struct iphdr *iph = data + OFF(in.l3_off);
		if ((void *)(iph + 1) > data_end)
			return count_drop(ctx, STAT_DROP_INNER_BAD, len);
		ipv4_dec_ttl(iph);
	}
	if (nvgre_strip(ctx, &in))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);

	if (r) {
		struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
		if (es) {
			es->tx_packets++;
			es->tx_bytes += ip_len;
		}
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		/* Let the kernel forward this one and resolve the neighbour. */
		__builtin_memcpy(eth->h_dest, ours, ETH_ALEN_);
		__builtin_memcpy(eth->h_source, peer, ETH_ALEN_);
		count_pass(ctx, STAT_DECAP_PASS, len);
		return XDP_PASS;
	}
	__builtin_memcpy(eth->h_dest, fibp->dmac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, fibp->smac, ETH_ALEN_);
	count_out(ctx, out_stat, len);
	return xmit(ctx, fibp->ifindex);
}

struct arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 op;
	__u8 sha[6];
	__be32 spa;
	__u8 tha[6];
	__be32 tpa;
} __attribute__((packed));

/* Answers an ARP request for a VIP (or an address of arp_addrs) on an
 * interface configured for it (a VIP on a segment the clients share with
 * the edge), while this edge owns its set's ARP scope (struct arp_owner). */
static __always_inline int arp_reply(struct xdp_md *ctx, struct pkt *p, __u64 len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	__u32 zero = 0;
	struct arp_iface *ai = bpf_map_lookup_elem(&arp_ifaces, &ifindex);
	if (!ai || p->l3_off != ETH_HLEN_)
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	struct arp_owner *own = bpf_map_lookup_elem(&arp_owner, &zero);
	if (!own || bpf_ktime_get_ns() >= own->until_ns)
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	struct ethhdr *eth = data;
	struct arp_ipv4 *a = data + ETH_HLEN_;
	if ((void *)(a + 1) > data_end)
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	if (a->htype != bpf_htons(ARPHRD_ETHER_) || a->ptype != bpf_htons(ETH_P_IP_) || a->hlen != ARP_HLEN_ETHER ||
	    a->plen != ARP_PLEN_IPV4 || a->op != bpf_htons(ARPOP_REQUEST_))
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	__be32 vip = a->tpa;
	struct eip_key k;
	eip_key4(&k, vip);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if ((!r || !(r->flags & ROUTE_F_VIP)) && !bpf_map_lookup_elem(&arp_addrs, &vip))
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	__be32 spa = a->spa;
	__builtin_memcpy(a->tha, a->sha, ETH_ALEN_);
	__builtin_memcpy(a->sha, ai->mac, ETH_ALEN_);
	a->tpa = spa;
	a->spa = vip;
	a->op = bpf_htons(ARPOP_REPLY_);
	__builtin_memcpy(eth->h_dest, a->tha, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, ai->mac, ETH_ALEN_);
	count_out(ctx, STAT_ARP_REPLY, len);
	return XDP_TX;
}

/* Ingress anti-spoofing: the counter a packet from the Internet side to
 * an EIP or VIP is dropped under, or 0. A source that is the destination
 * itself (a "land" attack), one of the region's own prefixes or the
 * underlay (edge_spoof_src), or a non-routable range never comes from the
 * Internet. Global (verified once, on its own): the lookup adds no states
 * to the paths that follow. */
__noinline __u32 spoof_class(const struct pkt *p)
{
	if (!p)
		return 0;
	__be32 saddr = p->saddr;
	if (saddr == p->daddr)
		return STAT_DROP_SPOOF_OWN;
	__u32 s = bpf_ntohl(saddr);
	/* 0/8, 127/8, 224/4 and 240/4 are martians parse_ipv4 dropped. */
	if ((s >> 24) == 10 || (s & 0xffff0000) == 0xa9fe0000 || /* 169.254/16 */
	    (s & 0xfff00000) == 0xac100000 || /* 172.16/12 */
	    (s & 0xffff0000) == 0xc0a80000 || /* 192.168/16 */
	    (s & 0xffc00000) == 0x64400000)   /* 100.64/10 */
		return STAT_DROP_SPOOF_BOGON;
	struct lpm4_key k = {.prefixlen = 32, .addr = saddr};
	__u32 *c = bpf_map_lookup_elem(&edge_spoof_src, &k);
	if (!c)
		return 0;
	return *c == SPOOF_UNDERLAY ? STAT_DROP_SPOOF_UNDERLAY : STAT_DROP_SPOOF_OWN;
}

/* IPv6 ingress anti-spoofing (spoof_class for IPv6 sources): the counter
 * a packet from the Internet side to an IPv6 EIP is dropped under, or 0.
 * A source that is the destination, one of the region's own IPv6 prefixes
 * or EIPs (edge_spoof_src6), unique-local (fc00::/7, RFC 4193: never
 * routed on the Internet) or link-local (fe80::/10: never forwarded, so
 * off its link whatever the protocol, ICMPv6 included; ::, ::1, multicast
 * and mapped sources were dropped by the parser as martians). Global:
 * verified once, on its own. */
__noinline __u32 spoof6_class(const struct pkt6 *p6)
{
	if (!p6)
		return 0;
	if (p6->saddr.a[0] == p6->daddr.a[0] && p6->saddr.a[1] == p6->daddr.a[1] &&
	    p6->saddr.a[2] == p6->daddr.a[2] && p6->saddr.a[3] == p6->daddr.a[3])
		return STAT_DROP_SPOOF_OWN;
	__u32 a0 = bpf_ntohl(p6->saddr.a[0]);
	if ((a0 & 0xfe000000) == 0xfc000000)
		return STAT_DROP_SPOOF_BOGON;
	if ((a0 & 0xffc00000) == 0xfe800000)
		return STAT_DROP_IP6_OFF_LINK;
	struct lpm6_key k = {.prefixlen = 128};
	__builtin_memcpy(&k.addr, &p6->saddr, 16);
	__u32 *c = bpf_map_lookup_elem(&edge_spoof_src6, &k);
	if (!c)
		return 0;
	return *c == SPOOF_UNDERLAY ? STAT_DROP_SPOOF_UNDERLAY : STAT_DROP_SPOOF_OWN;
}

/* What an eip_cache6 slot of IPv6 EIP a holds besides the route: its
 * flags (the route's flags, with ROUTE_F_RL_* when edge_limits6 has it
 * and ROUTE_F_BW when eip_bw6 has it;
 * bits 32-39) and its firewall scope and flags (fw_dest6; the low 32
 * bits). Global: called when a slot is filled, it adds no stack or
 * states to edge_ipv6. */
__noinline __u64 route6_extra(const struct ip_addr *a, __u32 flags)
{
	if (!a)
		return (__u64)flags << 32;
	__u8 f = rl_route_flags6(flags, a);
	if (bpf_map_lookup_elem(&eip_bw6, a))
		f |= ROUTE_F_BW;
	return (__u64)f << 32 | fw_dest6(a);
}

/* The route of an IPv6 EIP, through eip_cache6 (eip_route4's cache for
 * IPv6 destinations: the hash lookup of a 24-byte key cost this path about
 * 13 ns against the IPv4 path's cache hit); NULL when eip_routes has none. */
static __always_inline struct eip_centry6 *eip_route6(const struct pkt6 *p6)
{
	__u32 zero = 0;
	__u64 *gp = bpf_map_lookup_elem(&eip_route_gen, &zero);
	if (!gp)
		return NULL;
	__u64 tag = *gp + 1;
	const __be32 *a = p6->daddr.a;
	/* (In 8-byte words: p6 is ipv6_frame's, 8-byte aligned.) */
	__u32 slot = (ip6w_xor(a) * HASH_MUL_GOLDEN) >> (32 - __builtin_ctz(EIP6_CACHE_SLOTS));
	struct eip_centry6 *c = bpf_map_lookup_elem(&eip_cache6, &slot);
	if (!c)
		return NULL;
	if (c->gen == tag && ip6w_eq(&c->addr, a))
		return c;
	struct eip_key k = {.family = AF_INET6_};
	__builtin_memcpy(&k.addr, a, 16);
	struct eip_route *r = bpf_map_lookup_elem(&eip_routes, &k);
	if (!r)
		return NULL;
	__builtin_memcpy(&c->addr, a, 16);
	c->host = r->host.a[0];
	c->vsid = r->vsid;
	c->stats_idx = r->stats_idx;
	c->lgen = r->lgen;
	__u64 x = route6_extra(&p6->daddr, r->flags);
	c->flags = x >> 32;
	c->fw = (__u32)x;
	c->gen = tag;
	return c;
}

/* GRE over IPv6 to no IPv6 EIP (edge_ipv6): NVGRE from a host with an
 * IPv6 underlay address when it is to the edge's IPv6 underlay address
 * (else -1: the kernel's). It must come from the underlay interface
 * (drop_spoof, as over IPv4) and from a host's address (ul6_hosts: its
 * name, else drop_spoof): its outer headers go to edge_rooms.ul6 as
 * edge_from_host reads an IPv4 outer header's, the name as the source,
 * and the answer FRAME_NVGRE6_IN hands the frame to edge_from_host
 * (lib/entry.h, edge_main), whose checks are the IPv4 outer's: the GRE
 * header exact and no fragment (drop_gre_bad), the inner frame
 * (drop_inner_bad; an IPv6 guest's through edge_pull_failed), the inner
 * source an EIP or VIP of that host and VSID (drop_spoof). */
static __always_inline int ul6_from_host(struct xdp_md *ctx, const struct pkt6 *p6, __u64 len)
{
	__u32 zero = 0;
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	struct edge_config6 *c6 = bpf_map_lookup_elem(&edge_cfg6, &zero);
	struct ul6_room *ur = EDGE_ROOM(ul6);
	if (!cfg || !c6 || !ur)
		return -1;
	struct ul6_outer *o = &ur->out;
	if (!(c6->underlay.a[0] | c6->underlay.a[1] | c6->underlay.a[2] | c6->underlay.a[3]) ||
	    p6->daddr.a[0] != c6->underlay.a[0] || p6->daddr.a[1] != c6->underlay.a[1] ||
	    p6->daddr.a[2] != c6->underlay.a[2] || p6->daddr.a[3] != c6->underlay.a[3])
		return -1;
	if (cfg->ul_ifindex && ctx->ingress_ifindex != cfg->ul_ifindex)
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	/* edge_main takes it as NVGRE to the IPv4 underlay address: an
	 * edge without one takes no NVGRE over IPv6 either (drop_fib). */
	if (!cfg->underlay.a[0])
		return count_drop(ctx, STAT_DROP_FIB, len);
	struct ip_addr *name = bpf_map_lookup_elem(&ul6_hosts, &p6->saddr);
	if (!name || !UL6_HOST(name->a[0]) || !name->a[0])
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	o->host = name->a[0];
	o->daddr = cfg->underlay.a[0];
	o->l3_off = p6->p.l3_off;
	o->l4_off = p6->p.l4_off;
	o->ip_len = p6->p.ip_len;
	o->frag = p6->p.frag;
	return FRAME_NVGRE6_IN;
}

/* entry.h's AZG_UL6_OUTER: p as edge_from_host reads NVGRE's outer
 * headers, from ul6_from_host's. Returns 0 without them. */
static __always_inline int ul6_outer(struct pkt *p)
{
	struct ul6_room *ur = EDGE_ROOM(ul6);
	if (!ur)
		return 0;
	ul6_outer_pkt(p, &ur->out);
	return 1;
}

/* Internet -> an IPv6 EIP: encapsulated in NVGRE (over the IPv4 underlay)
 * to the host its route names, as edge_to_host does for IPv4: the same
 * key (VSID << 8 | FlowID, the FlowID from flow_hash6 of the 5-tuple),
 * inner MACs (destination 02:00 and the EIP's last four bytes, source the
 * edge's virtual router MAC), outer DF, TTL and TOS (the traffic class);
 * the hop limit decremented. An expired hop limit and a packet the
 * underlay's MTU cannot carry get ICMPv6 time exceeded and packet too
 * big (icmp6_answer), or are dropped (drop_ttl, drop_too_big) when none
 * is sent. An IPv6 VIP (a route flagged ROUTE_F_VIP) gets the same
 * firewall, anti-spoofing and limits, then is handed to lb6_ingress
 * (FRAME_VIP6 | its listener generation, the packet in edge_rooms.lb6).
 * Returns the XDP action, FRAME_VIP6 | lgen, or -1 for an address that is no EIP (the
 * caller passes it to the kernel). Called from entry.h's ipv6_frame for
 * every valid IPv6 packet, so no IPv4 path pays for it. */
static __always_inline int edge_ipv6(struct xdp_md *ctx, struct pkt6 *p6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0;
	struct pkt *p = &p6->p;

	struct eip_centry6 *r = eip_route6(p6);
	/* A neighbor solicitation (to a solicited-node group, no route; or
	 * to an IPv6 VIP, before its firewall and anti-spoofing, which would
	 * drop a router's from its link-local address): ndp_answer's, from
	 * xdp_edge's frame (FRAME_NDP): answered by the ARP owner on its ARP
	 * interfaces, else passed to the kernel, never load balanced. One to
	 * an IPv6 EIP is forwarded as any packet: its path pays one test. A
 * later fragment's first byte is no ICMPv6 type: not one (the scale
 * fuzzer found one to an IPv6 VIP passed before its firewall); nor is a
 * fragment, a packet with extension headers or one to HC6 (a review
 * found those passed to the kernel past the VIP's firewall and
 * hc6_direct): they take the paths of any packet. */
	if (p->proto == IPPROTO_ICMPV6_ && !p->frag && p->l4_off == p->l3_off + sizeof(struct ipv6hdr) &&
	    (!r || (r->flags & ROUTE_F_VIP)) && !hc6_is(&p6->daddr)) {
		__u8 *t = data + OFF(p->l4_off);
		if ((void *)(t + 1) <= data_end && *t == ICMP6_NS_)
			return FRAME_NDP;
	}
	if (!r) {
		/* NVGRE over IPv6 from a host with an IPv6 underlay address. */
		if (p->proto == IPPROTO_GRE_)
			return ul6_from_host(ctx, p6, len);
		/* Maybe a reply of an IPv6 VIP's nat connection: for
		 * lb6_nat_reverse, from xdp_edge's frame (FRAME_NAT6). */
		struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
		struct lb6_room *rm = EDGE_ROOM(lb6);
		if (!lbc || !(lbc->flags & LB_CFG_NAT) || !p->l4_ok || !rm)
			return -1;
		pkt6_copy(&rm->p6, p6);
		return FRAME_VIP6 | FRAME_NAT6;
	}
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	if (!cfg)
		return -1;
	if (ctx->ingress_ifindex != cfg->ul_ifindex) {
		/* In edge_main's order: the firewall, anti-spoofing, the
		 * rate limits. */
		__u32 sc = r->fw ? fw6_check(ctx, p6, r) : 0;
		if (!sc)
			sc = spoof6_class(p6);
		if (sc)
			return count_drop(ctx, sc, len);
		if (rl_applies(r->flags, p)) {
			sc = rl6_check(p6);
			if (sc)
				return count_drop(ctx, sc, len);
		}
		/* Last: only what would be forwarded spends the bandwidth. */
		if ((r->flags & ROUTE_F_BW) && bw6_over(p6))
			return count_drop(ctx, STAT_DROP_BW, len);
	} else if ((bpf_ntohl(p6->saddr.a[0]) & 0xffc00000) == 0xfe800000) {
		/* A link-local source is never forwarded (RFC 4291 2.5.6),
		 * from the underlay either: ipv6_frame's off-link check lets
		 * ICMPv6 through to the kernel, and spoof6_class is the
		 * Internet side's (found by the scale fuzzer). */
		return count_drop(ctx, STAT_DROP_IP6_OFF_LINK, len);
	}
	if (r->flags & ROUTE_F_VIP) {
		/* An IPv6 VIP: lb6_ingress, from xdp_edge's frame, takes the
		 * packet from edge_rooms.lb6. */
		struct lb6_room *rm = EDGE_ROOM(lb6);
		if (!rm)
			return -1;
		pkt6_copy(&rm->p6, p6);
		return FRAME_VIP6 | r->lgen;
	}
	if (p->ttl <= 1)
		return icmp6_answer(ctx, p6,
				    ICMP6_WHAT(ICMP_KIND_TTL, 0) | ((cfg->flags & CFG_F_ICMP_TTL) ? ICMP6_F_TTL_ON : 0), len);
	struct bpf_fib_lookup *fib = fib_room();
	if (!fib)
		return -1;
	__u32 key = (r->vsid << 8) | (flow_hash6(p6->saddr.a, p6->daddr.a, p->ports, p->proto, cfg->hash_seed) & 0xff);
	__be32 host = r->host;
	if (r->flags & ROUTE_F_DRIFT) {
		__u64 pv = drift6(p6, len);
		if (pv) {
			host = (__be32)pv;
			key = (pv >> 32) << 8 | (key & 0xff);
		}
	}
	__u32 idx = r->stats_idx;
	__u32 fid = key & 0xff;
	__be32 ul = cfg->underlay.a[0];
	__u16 ip_len = p->ip_len;
	__u32 l3_off = p->l3_off;
	__u8 tos = p->tos;
	__u8 syn = (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_;
	int rc = fib4f(ctx, fib, cfg->nh_gen, ul, host, ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0, bpf_htons(fid), fid);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* The largest inner packet the tunnel carries (icmp6_error
		 * sends none below 1280). */
		__u32 mtu = fib->mtu_result > NVGRE_OVERHEAD ? fib->mtu_result - NVGRE_OVERHEAD : 0;
		return icmp6_answer(ctx, p6, ICMP6_WHAT(ICMP_KIND_FRAG, mtu), len);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		if (rc == FIB_RET_UL6) {
			/* Inner MAC 02:00 and the EIP's last four bytes; the packet
			 * where tunnel6 finds it (an ICMPv6 error quotes it). */
			struct lb6_room *rm = EDGE_ROOM(lb6);
			if (!rm)
				return -1;
			pkt6_copy(&rm->p6, p6);
			if (ul6_ask(p, host, key, 0x02 | (__u64)p6->daddr.a[3] << 16 | UL6_INNER6 | (__u64)STAT_ENCAP_TX << 56,
				    idx) != UL6_DEFER)
				return XDP_ABORTED;
			return FRAME_UL6;
		}
		return count_drop(ctx, fib_reason(rc), len);
	}

	struct ipv6hdr *ip6 = data + OFF(l3_off);
	if ((void *)(ip6 + 1) > data_end)
		return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
	ip6->hop_limit--;

	/* The inner destination MAC and ethertype are written after the
	 * push (nvgre_push writes IPv4's): no copy of either on the stack,
	 * which this path shares with ipv6_frame's and xdp_edge's. */
	if (nvgre_to_w(ctx, l3_off, ip_len, tos, fib, ul, host, key, cfg->gw_mac, cfg->gw_mac))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *ieth = data + ETH_HLEN_ + sizeof(struct iphdr) + GRE_HLEN_KEY;
	if ((void *)(ieth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	ieth->h_dest[0] = 0x02;
	ieth->h_dest[1] = 0x00;
	__builtin_memcpy(&ieth->h_dest[2], &p6->daddr.a[3], 4);
	ieth->h_proto = bpf_htons(ETH_P_IPV6_);

	struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &idx);
	if (es) {
		es->rx_packets++;
		es->rx_bytes += ip_len;
		es->rx_syns += syn;
	}
	count_out(ctx, STAT_ENCAP_TX, len);
	return xmit(ctx, fib->ifindex);
}

/* The tunnel to a host with an IPv6 underlay address that a path asked
 * for (ul6_ask, the request in edge_rooms.ul6; an IPv6 inner packet also in
 * edge_rooms.lb6): the packet in NVGRE over IPv6 from the edge's IPv6
 * underlay address (edge_config6.underlay) to the host's (ul6_hosts), the
 * GRE key the request's, the flow label the key's low 20 bits (the
 * FlowID and the VSID's low 12 bits: the flow hash spreads a host's
 * tunnels over ECMP paths as the IPv4 tunnels' ports do, RFC 6438), the
 * outer traffic class the inner TOS, hop limit OUTER_TTL; the inner TTL
 * or hop limit decremented (the path checked it); counted under the
 * request's counter and slot. No IPv6 underlay address or host address:
 * drop_fib. A packet the tunnel cannot carry (the route's MTU less
 * NVGRE6_OVERHEAD, 20 bytes less than over IPv4): an IPv4 one gets
 * too_big's answer (ICMP_DEFER | ICMP_KIND_FRAG << 16 | MTU for
 * icmp_send, drop_too_big without DF), an IPv6 one icmp6_answer's.
 * Global, called from xdp_edge's frame (icmp_send, parse_frame). */
__noinline int tunnel6(struct xdp_md *ctx)
{
	__u32 zero = 0;
	if (!ctx)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct ul6_room *ur = EDGE_ROOM(ul6);
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	struct edge_config6 *c6 = bpf_map_lookup_elem(&edge_cfg6, &zero);
	struct bpf_fib_lookup *fib = fib_room();
	if (!ur || !cfg || !c6 || !fib)
		return XDP_ABORTED;
	struct ul6_req *rq = &ur->req;
	struct ip_addr *hk = &ur->key;
	hk->a[0] = rq->host;
	hk->a[1] = hk->a[2] = hk->a[3] = 0;
	struct ip_addr *dst = bpf_map_lookup_elem(&ul6_hosts, hk);
	if (!dst || !(dst->a[0] | dst->a[1] | dst->a[2] | dst->a[3]) ||
	    !(c6->underlay.a[0] | c6->underlay.a[1] | c6->underlay.a[2] | c6->underlay.a[3]))
		return count_drop(ctx, STAT_DROP_FIB, len);
	__u32 key = rq->key;
	__u32 fid = key & 0xff;
	__u16 ip_len = rq->ip_len;
	int rc = fib6f(ctx, fib, cfg->nh_gen, &c6->underlay, dst, ip_len + NVGRE6_OVERHEAD, IPPROTO_GRE_,
		       bpf_htonl(key & 0xfffff), bpf_htons(fid), fid);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		__u32 mtu = fib->mtu_result > NVGRE6_OVERHEAD ? (fib->mtu_result - NVGRE6_OVERHEAD) & 0xffff : 0;
		if (rq->im & UL6_INNER6) {
			struct lb6_room *rm = EDGE_ROOM(lb6);
			if (!rm)
				return XDP_ABORTED;
			return icmp6_answer(ctx, &rm->p6, ICMP6_WHAT(ICMP_KIND_FRAG, mtu), len);
		}
		if (!rq->df)
			return count_drop(ctx, STAT_DROP_TOO_BIG, len);
		return ICMP_DEFER | (ICMP_KIND_FRAG << 16) | (mtu > 68 ? mtu : 68);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count_drop(ctx, fib_reason(rc), len);
	__u32 l3_off = rq->l3_off;
	__be16 eproto = bpf_htons(ETH_P_IP_);
	if (rq->im & UL6_INNER6) {
		struct ipv6hdr *ip6 = data + OFF(l3_off);
		if ((void *)(ip6 + 1) > data_end)
			return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
		ip6->hop_limit--;
		eproto = bpf_htons(ETH_P_IPV6_);
	} else {
		struct iphdr *iph = data + OFF(l3_off);
		if ((void *)(iph + 1) > data_end)
			return count_drop(ctx, STAT_DROP_IP_TRUNC, len);
		ipv4_dec_ttl(iph);
	}
	if (nvgre6_push(ctx, OFF(l3_off), ip_len, fib->dmac, fib->smac, &c6->underlay, dst, key, rq->tos,
			key & 0xfffff, (const __u8 *)&rq->im, cfg->gw_mac, eproto))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	__u32 stat = (rq->im >> 56) & 0xff;
	__u32 slot = rq->idx;
	if (stat == STAT_ENCAP_TX) {
		struct eip_stats *es = bpf_map_lookup_elem(&eip_stats, &slot);
		if (es) {
			es->rx_packets++;
			es->rx_bytes += ip_len;
			es->rx_syns += rq->syn;
		}
	} else {
		lb_count(&lb_be_stats, slot, ip_len, 0);
	}
	count_out(ctx, stat, len);
	return xmit(ctx, fib->ifindex);
}

static __always_inline int edge_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct pkt p;
	__u32 zero = 0;
	int rc;

	rc = parse_frame(ctx, data, data_end, &p, len, FRAME_F_ARP | FRAME_F_V6_OFF_LINK);
	if (rc == FRAME_ARP)
		return arp_reply(ctx, &p, len);
	/* (NVGRE over IPv6 from a host is FRAME_IPV4 too, p holding its
	 * outer headers as an IPv4 outer header's: ul6_from_host.) */
	if (rc != FRAME_IPV4)
		return rc;

	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	/* The scratch lookup comes after the anti-spoofing call: a value live
	 * across it would be spilled, and the stack is at its limit. */
	struct bpf_fib_lookup *fib;
	if (nvgre_for_us(&p, &cfg->underlay.a[0])) {
		fib = fib_room();
		if (!fib)
			return XDP_PASS;
		return edge_from_host(ctx, &p, cfg, fib, len);
	}

	/* One lookup on the destination: a VIP, an EIP, or neither. */
	struct eip_centry *r = eip_route4(p.daddr);
	/* From the Internet side (anything but the underlay interface), to
	 * an EIP or VIP: no source of our own, the underlay's or a
	 * non-routable one. */
	if (r && ctx->ingress_ifindex != cfg->ul_ifindex) {
		/* The firewall first: a denied flood is dropped from its
		 * verdict cache without the anti-spoofing trie walk. Then
		 * anti-spoofing, then the rate limits: what is dropped before
		 * spends no source's or SYN guard's tokens. */
		if (r->fw && fw_drop(ctx, &p, r->fw, r->gen, len))
			return XDP_DROP;
		__u32 sc = spoof_class(&p);
		if (sc)
			return count_drop(ctx, sc, len);
		if (rl_applies(r->flags, &p)) {
			sc = rl_check(&p);
			if (sc)
				return count_drop(ctx, sc, len);
		}
		/* Last: only what would be forwarded spends the EIP's bandwidth. */
		if ((r->flags & ROUTE_F_BW) && bw_over(r->stats_idx, p.daddr, p.ip_len))
			return count_drop(ctx, STAT_DROP_BW, len);
	} else if (r && (bpf_ntohl(p.saddr) & 0xffff0000) == 0xa9fe0000) {
		/* A link-local source (169.254/16) is never forwarded (RFC
		 * 3927 7), from the underlay either: spoof_class, which
		 * counts it a bogon, is the Internet side's. The IPv4 twin of
		 * edge_ipv6's link-local check (found by the scale fuzzer). */
		return count_drop(ctx, STAT_DROP_IP_MARTIAN, len);
	}
	fib = fib_room();
	if (!fib)
		return XDP_PASS;
	if (r) {
		int act = (r->flags & ROUTE_F_VIP) ? lb_ingress(ctx, &p, fib, cfg, r->lgen)
						   : edge_to_host(ctx, &p, cfg, fib, r, len);
		return icmp_send(ctx, &p, cfg, act, len);
	}

	struct lb_config *lbc = bpf_map_lookup_elem(&lb_cfg, &zero);
	if (lbc && (lbc->flags & LB_CFG_NAT) && p.l4_ok) {
		int act = lb_nat_reverse(ctx, &p, fib, cfg);
		if (act != NAT_NOT_OURS)
			return icmp_send(ctx, &p, cfg, act, len);
	}
	/* The health-check address only takes answers from the tunnel. */
	__be32 hc = hc_addr();
	if (hc && p.daddr == hc) {
		hc_count(HC_STAT_DROP_DIRECT, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	return count_pass(ctx, STAT_PASS_NOT_OURS, len);
}

SEC("xdp")
int xdp_edge(struct xdp_md *ctx)
{
	mon_event(ctx, 0, MON_K_IN);
	return edge_main(ctx);
}

