/* hc.h: health checks that travel the tunnel (issue 7, section 4), the
 * edge's half. Included by edge.c after its maps.
 *
 * An encap-mode backend is a guest behind an agent; its private address
 * means nothing on the underlay (tenants' addresses overlap), so the edge
 * checks it the way clients reach it: in NVGRE to its host. The design is
 * Katran's healthchecking (a marked socket, a tc program that
 * encapsulates):
 *
 *   - the edge daemon's checker dials the guest's private address from the
 *     edge's health-check address (HC: a per-edge address of its
 *     own, never an EIP or VIP: hc_address) with SO_MARK = the backend's mark;
 *   - a policy rule sends everything from HC to a dedicated veth, where
 *     tc_edge_hc (TCX egress) looks the mark up in hc_marks (mark -> host,
 *     VSID, guest), encapsulates the packet in NVGRE to the host and
 *     redirects it out of the underlay interface;
 *   - the agent delivers it to the guest (its private address on that
 *     VSID) and records the flow, so the reply comes back in NVGRE to this
 *     edge (bpf/lib/agenthc.h);
 *   - xdp_edge sends NVGRE whose inner destination is HC to hc_reply: from
 *     the underlay only, and only when hc_peers holds its (host, VSID,
 *     guest), the outer headers are stripped and the inner packet goes up
 *     to the kernel, where the checker's socket takes it by its 4-tuple
 *     (two guests with one private address differ in the socket's port),
 *     but only when such a socket exists (hc_sock_ok): a TCP socket of the
 *     edge's own on the 4-tuple that is not a listener, or a UDP socket
 *     connected to the guest's address and port. A checked host cannot
 *     reach the edge kernel's other ports (sshd, snmpd: listeners and
 *     unconnected sockets on the wildcard address) through HC; ICMP and
 *     fragments to HC are dropped too (a check's answer fits one packet;
 *     an ICMP error only makes a probe fail sooner than its timeout).
 *     Anything else to HC (another inner destination never gets here; a
 *     plain packet to HC, an unknown peer) is dropped and counted.
 *
 * IPv6 guests (issue 21) are checked the same way from the edge's IPv6
 * health-check address (HC6, hc_address6, edge --health-source6): marks
 * in hc_marks6, the answers by hc6_reply (from edge_pull_failed, which
 * parses an inner IPv6 packet) and hc6_sock_ok, peers in hc_peers with
 * the IPv4 guests', anything else to HC6 dropped (hc6_direct).
 */
#ifndef AZG_HC_H
#define AZG_HC_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "consts.h"
#include "structs.h"
#include "csum.h"
#include "parse.h"
#include "hash.h"
#include "nvgre.h"


/* The health-check address (HC), written by the edge daemon before it
 * attaches the programs; 0: tunnel checks off. A global, not a map: the
 * decapsulation path reads it with no key on its stack (xdp_edge's stack
 * and its service calls share 512 bytes). */
__be32 hc_address;

/* The IPv6 health-check address (HC6, edge --health-source6), written as
 * hc_address is; :: tunnel checks of IPv6 guests off. In the same
 * global-data section as hc_address (.bss): no map of its own to the
 * kernel's count. */
struct ip_addr hc_address6;

/* Its maps (hc_marks, hc_peers, hc_stats) are in maps.h. */

static __always_inline void hc_count(__u32 idx, __u64 bytes)
{
	struct stat_entry *s = bpf_map_lookup_elem(&hc_stats, &idx);
	if (s) {
		s->packets++;
		s->bytes += bytes;
	}
}

/* The health-check address, 0 when tunnel checks are off. */
static __always_inline __be32 hc_addr(void)
{
	return *(volatile __be32 *)&hc_address;
}

/* Whether a is HC6 (never when HC6 is ::). */
static __always_inline int hc6_is(const struct ip_addr *a)
{
	const volatile __be32 *h = (const volatile __be32 *)hc_address6.a;
	__be32 h0 = h[0], h1 = h[1], h2 = h[2], h3 = h[3];
	return (h0 | h1 | h2 | h3) && a->a[0] == h0 && a->a[1] == h1 && a->a[2] == h2 && a->a[3] == h3;
}

/* Whether the frame (an inner packet to HC, its outer headers stripped:
 * the IPv4 header right after Ethernet) is TCP or UDP for a probe socket of
 * this edge: bpf_skc_lookup_tcp finds a socket on the 4-tuple that must
 * not be a listener (a request or time-wait socket is a probe's too);
 * bpf_sk_lookup_udp a socket that must be connected to the packet's source
 * (a UDP check dials: a socket bound to the wildcard is a service of the
 * edge's). The lookup is in the namespace of the receiving device, the
 * checker's. A global (separately verified) function: the socket
 * references it takes are released before it returns, and xdp_edge's
 * verification does not grow with its branches. */
__noinline int hc_sock_ok(struct xdp_md *ctx)
{
	if (!ctx)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + ETH_HLEN_;
	if ((void *)(iph + 1) > data_end || iph->version != 4 || iph->ihl < 5)
		return 0;
	if (iph->frag_off & bpf_htons(IP_MF_ | IP_OFFMASK_))
		return 0;
	__u8 proto = iph->protocol;
	if (proto != IPPROTO_TCP_ && proto != IPPROTO_UDP_)
		return 0;
	__u32 ihl = (iph->ihl & 0xf) * 4;
	__be16 *pp = (void *)iph + ihl;
	if ((void *)(pp + 2) > data_end)
		return 0;
	struct bpf_sock_tuple t = {};
	t.ipv4.saddr = iph->saddr;
	t.ipv4.daddr = iph->daddr;
	t.ipv4.sport = pp[0];
	t.ipv4.dport = pp[1];
	struct bpf_sock *sk;
	int ok;
	if (proto == IPPROTO_TCP_) {
		sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return 0;
		ok = sk->state != BPF_TCP_LISTEN;
	} else {
		sk = bpf_sk_lookup_udp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return 0;
		ok = sk->dst_ip4 == t.ipv4.saddr && sk->dst_port == t.ipv4.sport;
	}
	bpf_sk_release(sk);
	return ok;
}

/* XDP, NVGRE from a host whose inner destination is HC (host: the outer
 * source, already taken from the underlay interface only; guest: the
 * inner source). A reply of a checked backend to a probe socket
 * (hc_sock_ok) goes up to the kernel without its outer headers, addressed
 * to the MAC the outer frame was sent to (the underlay interface's) so the
 * stack takes it; anything else is dropped. */
static __noinline int hc_reply(struct xdp_md *ctx, __be32 host, __be32 guest, __u32 vsid, __u32 l3_len)
{
	/* Not inlined, and given scalars (l3_len: the inner packet's l3_off
	 * << 16 | its ip_len): xdp_edge's frame, which its service calls
	 * share 512 bytes of stack with, does not grow. */
	__u64 len = (long)ctx->data_end - (long)ctx->data;
	struct pkt inner = {.l3_off = l3_len >> 16, .ip_len = l3_len & 0xffff};
	const struct pkt *in = &inner;
	struct hc_peer k = {.host = host, .vsid = vsid, .guest = {.a = {guest}}};
	if (!bpf_map_lookup_elem(&hc_peers, &k)) {
		hc_count(HC_STAT_DROP_PEER, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	__u8 ours[ETH_ALEN_], peer[ETH_ALEN_];
	__builtin_memcpy(ours, oeth->h_dest, ETH_ALEN_);
	__builtin_memcpy(peer, oeth->h_source, ETH_ALEN_);
	if (nvgre_strip(ctx, in))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	__builtin_memcpy(eth->h_dest, ours, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, peer, ETH_ALEN_);
	if (!hc_sock_ok(ctx)) {
		hc_count(HC_STAT_DROP_NO_SOCK, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	hc_count(HC_STAT_REPLY_PASS, len);
	return count_pass(ctx, STAT_PASS_HC_REPLY, len);
}

/* hc_sock_ok for IPv6: whether the frame (an inner packet to HC6, its
 * outer headers stripped: the IPv6 header right after Ethernet, TCP or UDP
 * right after it, unfragmented) is for a probe socket of this edge: a TCP
 * socket on the 4-tuple that is not a listener, or a UDP socket connected
 * to the packet's source. The tuple in the room (edge_rooms.e6.tup).
 * Global, as hc_sock_ok. */
__noinline int hc6_sock_ok(struct xdp_md *ctx)
{
	if (!ctx)
		return 0;
	struct edge_room6 *room = EDGE_ROOM(e6);
	if (!room)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ipv6hdr *ip6 = data + ETH_HLEN_;
	__be16 *pp = data + ETH_HLEN_ + sizeof(*ip6);
	if ((void *)(pp + 2) > data_end || ip6->version != 6)
		return 0;
	__u8 proto = ip6->nexthdr;
	if (proto != IPPROTO_TCP_ && proto != IPPROTO_UDP_)
		return 0;
	struct hc6_tuple *t = &room->tup;
	__builtin_memcpy(t->saddr, &ip6->saddr, 16);
	__builtin_memcpy(t->daddr, &ip6->daddr, 16);
	t->sport = pp[0];
	t->dport = pp[1];
	struct bpf_sock *sk;
	int ok;
	if (proto == IPPROTO_TCP_) {
		sk = bpf_skc_lookup_tcp(ctx, (struct bpf_sock_tuple *)t, sizeof(*t), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return 0;
		ok = sk->state != BPF_TCP_LISTEN;
	} else {
		sk = bpf_sk_lookup_udp(ctx, (struct bpf_sock_tuple *)t, sizeof(*t), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return 0;
		ok = sk->dst_ip6[0] == t->saddr[0] && sk->dst_ip6[1] == t->saddr[1] && sk->dst_ip6[2] == t->saddr[2] &&
		     sk->dst_ip6[3] == t->saddr[3] && sk->dst_port == t->sport;
	}
	bpf_sk_release(sk);
	return ok;
}

/* hc_reply for IPv6 guests: NVGRE from host (the outer source or an IPv6
 * host's name, already taken from the underlay interface only) on vsid
 * whose inner IPv6 packet (parsed in edge_rooms.e6.p6 by edge_pull_failed)
 * is from no IPv6 EIP or VIP: not to HC6, drop_spoof. From a checked (host, VSID, guest6) (hc_peers), TCP or UDP
 * without extension headers or fragments, to a probe socket
 * (hc6_sock_ok): up to the kernel without the outer headers, addressed to
 * the MAC the outer frame was sent to; anything else dropped (drop_spoof;
 * hc_drop_peer, hc_drop_no_sock). Global: edge_pull_failed's frame does not
 * grow. */
__noinline int hc6_reply(struct xdp_md *ctx, __be32 host, __u32 vsid)
{
	if (!ctx)
		return XDP_ABORTED;
	__u64 len = (long)ctx->data_end - (long)ctx->data;
	struct edge_room6 *room = EDGE_ROOM(e6);
	if (!room)
		return XDP_ABORTED;
	struct pkt6 *p6 = &room->p6;
	if (!hc6_is(&p6->daddr))
		return count_drop(ctx, STAT_DROP_SPOOF, len); /* an unknown inner source, spoofed */
	struct hc_peer *k = &room->hk;
	k->host = host;
	k->vsid = vsid;
	k->guest = p6->saddr;
	if (!bpf_map_lookup_elem(&hc_peers, k)) {
		hc_count(HC_STAT_DROP_PEER, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	/* A check's answer is one TCP or UDP packet with no extension
	 * header (hc6_sock_ok reads the ports right after the header). */
	if ((p6->p.proto != IPPROTO_TCP_ && p6->p.proto != IPPROTO_UDP_) || p6->p.frag ||
	    p6->p.l4_off != p6->p.l3_off + 40) {
		hc_count(HC_STAT_DROP_NO_SOCK, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	__builtin_memcpy(room->ours, oeth->h_dest, ETH_ALEN_);
	__builtin_memcpy(room->peer, oeth->h_source, ETH_ALEN_);
	if (nvgre_strip(ctx, &p6->p))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	__builtin_memcpy(eth->h_dest, room->ours, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, room->peer, ETH_ALEN_);
	if (!hc6_sock_ok(ctx)) {
		hc_count(HC_STAT_DROP_NO_SOCK, len);
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	hc_count(HC_STAT_REPLY_PASS, len);
	return count_pass(ctx, STAT_PASS_HC_REPLY, len);
}

/* An IPv6 packet p6 (len bytes) to no EIP or VIP (entry.h's
 * AZG_IPV6_NOT_OURS, before pass_ipv6; lb6_nat_reverse, for what is no
 * nat reply) to HC6, outside the tunnel: counted (hc_drop_direct), and
 * its drop reason returned (drop_spoof), else 0. Inlined where the
 * packet would be passed: the paths before it keep their code. */
static __always_inline __u32 hc6_direct(const struct pkt6 *p6, __u64 len)
{
	if (!hc6_is(&p6->daddr))
		return 0;
	hc_count(HC_STAT_DROP_DIRECT, len);
	return STAT_DROP_SPOOF;
}

/* The NVGRE headers tc_edge_hc writes in front of the inner packet, over
 * the IPv4 underlay: outer Ethernet, IPv4 and GRE, inner Ethernet (as
 * nvgre_push's). */
struct hc_stack {
	struct ethhdr oeth;
	struct iphdr oip;
	struct gre_key_hdr gre;
	struct ethhdr ieth;
} __attribute__((packed));

/* The same over the IPv6 underlay (as nvgre6_push's): the outer IPv6
 * header as words. */
struct hc_stack6 {
	struct ethhdr oeth;
	__be32 oip[10];
	struct gre_key_hdr gre;
	struct ethhdr ieth;
} __attribute__((packed));

/* tc_edge_hc's tunnel: the probe (ip_len bytes of IPv4 or IPv6 at
 * ETH_HLEN_, inner ethertype eproto, outer TOS or traffic class tos) in
 * NVGRE to host on vsid (key VSID << 8 | fid), the inner destination MAC
 * 02:00 + mac4 (the guest's IPv4 address, or its IPv6 address's last four
 * bytes, as the EIP paths name guests), out of the underlay interface. A
 * host of the IPv6 underlay (its name in 0.0.0.0/8, UL6_HOST) gets an
 * outer IPv6 header from the edge's IPv6 underlay address to the host's
 * (ul6_hosts; flow label the key's low 20 bits, as tunnel6's), anyone
 * else an outer IPv4 header from the IPv4 underlay address. Returns the
 * TC action, counted. */
static __always_inline int hc_send(struct __sk_buff *skb, const struct edge_config *cfg, __be32 host, __u32 vsid,
				   __u32 fid, __u16 ip_len, __u8 tos, __be32 mac4, __be16 eproto, __u64 len)
{
	__u32 zero = 0;
	__u32 key = (vsid << 8) | fid;
	struct bpf_fib_lookup fib = {};
	const struct ip_addr *dst = NULL, *src = NULL;
	fib.l4_protocol = IPPROTO_GRE_;
	fib.ifindex = cfg->ul_ifindex;
	if (UL6_HOST(host)) {
		struct edge_config6 *c6 = bpf_map_lookup_elem(&edge_cfg6, &zero);
		struct ip_addr hk = {.a = {host}};
		dst = bpf_map_lookup_elem(&ul6_hosts, &hk);
		if (!c6 || !host || !dst || !(dst->a[0] | dst->a[1] | dst->a[2] | dst->a[3]) ||
		    !(c6->underlay.a[0] | c6->underlay.a[1] | c6->underlay.a[2] | c6->underlay.a[3])) {
			hc_count(HC_STAT_DROP_FIB, len);
			return TC_ACT_SHOT;
		}
		src = &c6->underlay;
		fib.family = 10; /* AF_INET6 */
		fib.tot_len = ip_len + NVGRE6_OVERHEAD;
		fib.flowinfo = bpf_htonl(key & 0xfffff);
		__builtin_memcpy(fib.ipv6_src, src, 16);
		__builtin_memcpy(fib.ipv6_dst, dst, 16);
	} else {
		fib.family = 2; /* AF_INET */
		fib.tot_len = ip_len + NVGRE_OVERHEAD;
		fib.ipv4_src = cfg->underlay.a[0];
		fib.ipv4_dst = host;
	}
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || fib.ifindex != cfg->ul_ifindex) {
		hc_count(HC_STAT_DROP_FIB, len);
		return TC_ACT_SHOT;
	}
	__u8 imac[ETH_ALEN_] = {0x02, 0x00};
	__builtin_memcpy(&imac[2], &mac4, 4);
	int err;
	if (dst && src) {
		if (bpf_skb_adjust_room(skb, NVGRE6_OVERHEAD, BPF_ADJ_ROOM_MAC,
					BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | BPF_F_ADJ_ROOM_ENCAP_L4_GRE |
						BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN_))) {
			hc_count(HC_STAT_DROP_HEADROOM, len);
			return TC_ACT_SHOT;
		}
		struct hc_stack6 s = {};
		__builtin_memcpy(s.oeth.h_dest, fib.dmac, ETH_ALEN_);
		__builtin_memcpy(s.oeth.h_source, fib.smac, ETH_ALEN_);
		s.oeth.h_proto = bpf_htons(ETH_P_IPV6_);
		s.oip[0] = bpf_htonl(6 << 28 | (__u32)tos << 20 | (key & 0xfffff));
		s.oip[1] = bpf_htonl((__u32)(ip_len + NVGRE6_OVERHEAD - 40) << 16 | IPPROTO_GRE_ << 8 | OUTER_TTL);
		__builtin_memcpy(&s.oip[2], src, 16);
		__builtin_memcpy(&s.oip[6], dst, 16);
		s.gre.flags = bpf_htons(GRE_FLAG_K);
		s.gre.proto = bpf_htons(GRE_PROTO_TEB);
		s.gre.key = bpf_htonl(key);
		__builtin_memcpy(s.ieth.h_dest, imac, ETH_ALEN_);
		__builtin_memcpy(s.ieth.h_source, cfg->gw_mac, ETH_ALEN_);
		s.ieth.h_proto = eproto;
		err = bpf_skb_store_bytes(skb, 0, &s, sizeof(s), 0);
	} else {
		if (bpf_skb_adjust_room(skb, NVGRE_OVERHEAD, BPF_ADJ_ROOM_MAC,
					BPF_F_ADJ_ROOM_ENCAP_L3_IPV4 | BPF_F_ADJ_ROOM_ENCAP_L4_GRE |
						BPF_F_ADJ_ROOM_ENCAP_L2_ETH | BPF_F_ADJ_ROOM_ENCAP_L2(ETH_HLEN_))) {
			hc_count(HC_STAT_DROP_HEADROOM, len);
			return TC_ACT_SHOT;
		}
		struct hc_stack s = {};
		__builtin_memcpy(s.oeth.h_dest, fib.dmac, ETH_ALEN_);
		__builtin_memcpy(s.oeth.h_source, fib.smac, ETH_ALEN_);
		s.oeth.h_proto = bpf_htons(ETH_P_IP_);
		s.oip.version = 4;
		s.oip.ihl = 5;
		s.oip.tos = tos;
		s.oip.tot_len = bpf_htons(ip_len + NVGRE_OVERHEAD);
		s.oip.frag_off = bpf_htons(IP_DF_);
		s.oip.ttl = OUTER_TTL;
		s.oip.protocol = IPPROTO_GRE_;
		s.oip.saddr = cfg->underlay.a[0];
		s.oip.daddr = host;
		s.oip.check = ipv4_csum20(&s.oip);
		s.gre.flags = bpf_htons(GRE_FLAG_K);
		s.gre.proto = bpf_htons(GRE_PROTO_TEB);
		s.gre.key = bpf_htonl(key);
		/* Inner source: the edge's virtual router MAC. */
		__builtin_memcpy(s.ieth.h_dest, imac, ETH_ALEN_);
		__builtin_memcpy(s.ieth.h_source, cfg->gw_mac, ETH_ALEN_);
		s.ieth.h_proto = eproto;
		err = bpf_skb_store_bytes(skb, 0, &s, sizeof(s), 0);
	}
	if (err) {
		hc_count(HC_STAT_DROP_HEADROOM, len);
		return TC_ACT_SHOT;
	}
	skb->mark = 0;
	hc_count(HC_STAT_PROBE_TX, len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	return bpf_redirect(fib.ifindex, 0);
}

/* tc_edge_hc for an IPv6 probe (from HC6, marked with an IPv6 guest's
 * mark: hc_marks6) to the mark's guest: TCP or UDP without extension
 * headers gets its ports in the FlowID's hash, anything else the
 * addresses' only. */
static __always_inline int hc_probe6(struct __sk_buff *skb, const struct edge_config *cfg, __u32 mark, __u64 len)
{
	struct hc_target6 *t = bpf_map_lookup_elem(&hc_marks6, &mark);
	if (!t) {
		hc_count(HC_STAT_DROP_NO_MARK, len);
		return TC_ACT_SHOT;
	}
	__be32 host = t->host;
	__u32 vsid = t->vsid;
	struct ip_addr guest = t->guest;
	if (bpf_skb_pull_data(skb, ETH_HLEN_ + 40 + 4)) {
		hc_count(HC_STAT_DROP_BAD, len);
		return TC_ACT_SHOT;
	}
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = data + ETH_HLEN_;
	if ((void *)(ip6 + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6_) || ip6->version != 6 ||
	    !hc6_is((const struct ip_addr *)&ip6->saddr) || ip6->daddr.in6_u.u6_addr32[0] != guest.a[0] ||
	    ip6->daddr.in6_u.u6_addr32[1] != guest.a[1] || ip6->daddr.in6_u.u6_addr32[2] != guest.a[2] ||
	    ip6->daddr.in6_u.u6_addr32[3] != guest.a[3]) {
		hc_count(HC_STAT_DROP_BAD, len);
		return TC_ACT_SHOT;
	}
	__u16 ip_len = 40 + bpf_ntohs(ip6->payload_len);
	__u8 proto = ip6->nexthdr;
	__u8 tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
	__be32 ports = 0;
	__be32 *pp = (void *)(ip6 + 1);
	if ((proto == IPPROTO_TCP_ || proto == IPPROTO_UDP_) && (void *)(pp + 1) <= data_end)
		ports = *pp;
	struct ip_addr src;
	__builtin_memcpy(&src, &ip6->saddr, 16);
	__u32 fid = flow_hash6(src.a, guest.a, ports, proto, cfg->hash_seed) & 0xff;
	return hc_send(skb, cfg, host, vsid, fid, ip_len, tos, guest.a[3], bpf_htons(ETH_P_IPV6_), len);
}

/* TCX egress of the health-check device: a probe from HC (or HC6),
 * marked with its backend's mark, leaves in NVGRE to the backend's host
 * through the underlay interface (hc_send: over IPv4 or the IPv6
 * underlay, as the host has). IPv6 frames are looked up in hc_marks6,
 * the rest in hc_marks. Everything else that reaches the device (an
 * unknown mark, a kernel RST without one, ARP, a router solicitation or
 * MLD report, a packet to another address than its mark's guest) is
 * dropped: nothing from HC or HC6 leaves outside the tunnel. */
SEC("tc")
int tc_edge_hc(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u64 len = skb->len;
	__u32 mark = skb->mark;
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
	if (skb->protocol == bpf_htons(ETH_P_IPV6_)) {
		if (!cfg || !cfg->ul_ifindex) {
			hc_count(HC_STAT_DROP_BAD, len);
			return TC_ACT_SHOT;
		}
		return hc_probe6(skb, cfg, mark, len);
	}
	struct hc_target *t = bpf_map_lookup_elem(&hc_marks, &mark);
	if (!t) {
		hc_count(HC_STAT_DROP_NO_MARK, len);
		return TC_ACT_SHOT;
	}
	__be32 hc = hc_addr();
	if (!cfg || !hc || !cfg->ul_ifindex || !cfg->underlay.a[0]) {
		hc_count(HC_STAT_DROP_BAD, len);
		return TC_ACT_SHOT;
	}
	__be32 host = t->host, guest = t->guest;
	__u32 vsid = t->vsid;
	/* A socket's data sits in page fragments: the headers must be in the
	 * linear part to be read (a probe is small). */
	if (bpf_skb_pull_data(skb, ETH_HLEN_ + 20 + 4)) {
		hc_count(HC_STAT_DROP_BAD, len);
		return TC_ACT_SHOT;
	}
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = data + ETH_HLEN_;
	if ((void *)(iph + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP_) || iph->version != 4 ||
	    iph->ihl != 5 || iph->saddr != hc || iph->daddr != guest) {
		hc_count(HC_STAT_DROP_BAD, len);
		return TC_ACT_SHOT;
	}
	__u16 ip_len = bpf_ntohs(iph->tot_len);
	__u8 proto = iph->protocol, tos = iph->tos;
	__be32 ports = 0;
	__be32 *pp = (void *)(iph + 1);
	if ((proto == IPPROTO_TCP_ || proto == IPPROTO_UDP_) && (void *)(pp + 1) <= data_end &&
	    !(bpf_ntohs(iph->frag_off) & IP_OFFMASK_))
		ports = *pp;
	__u32 fid = flow_hash4(hc, guest, ports, proto, cfg->hash_seed) & 0xff;
	return hc_send(skb, cfg, host, vsid, fid, ip_len, tos, guest, bpf_htons(ETH_P_IP_), len);
}

#endif
