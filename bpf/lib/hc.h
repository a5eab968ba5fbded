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
	struct hc_peer k = {.host = host, .guest = guest, .vsid = vsid};
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

/* The NVGRE headers tc_edge_hc writes in front of the inner IPv4 header:
 * outer Ethernet, IPv4 and GRE, inner Ethernet (as nvgre_push's). */
struct hc_stack {
	struct ethhdr oeth;
	struct iphdr oip;
	struct gre_key_hdr gre;
	struct ethhdr ieth;
} __attribute__((packed));

/* TCX egress of the health-check device: a probe from HC, marked with its
 * backend's mark, leaves in NVGRE to the backend's host through the
 * underlay interface. Everything else that reaches the device (an unknown
 * mark, a kernel RST without one, ARP, IPv6) is dropped: nothing from HC
 * leaves outside the tunnel. */
SEC("tc")
int tc_edge_hc(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u64 len = skb->len;
	__u32 mark = skb->mark;
	struct hc_target *t = bpf_map_lookup_elem(&hc_marks, &mark);
	if (!t) {
		hc_count(HC_STAT_DROP_NO_MARK, len);
		return TC_ACT_SHOT;
	}
	struct edge_config *cfg = bpf_map_lookup_elem(&edge_cfg, &zero);
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

	struct bpf_fib_lookup fib = {};
	fib.family = 2; /* AF_INET */
	fib.l4_protocol = IPPROTO_GRE_;
	fib.tot_len = ip_len + NVGRE_OVERHEAD;
	fib.ifindex = cfg->ul_ifindex;
	fib.ipv4_src = cfg->underlay.a[0];
	fib.ipv4_dst = host;
	long rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if ((rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH) || fib.ifindex != cfg->ul_ifindex) {
		hc_count(HC_STAT_DROP_FIB, len);
		return TC_ACT_SHOT;
	}

	__u32 fid = flow_hash4(hc, guest, ports, proto, cfg->hash_seed) & 0xff;
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
	s.gre.key = bpf_htonl((vsid << 8) | fid);
	/* Inner destination MAC: 02:00 + the guest's address, as the EIP
	 * path's; source: the edge's virtual router MAC. */
	s.ieth.h_dest[0] = 0x02;
	__builtin_memcpy(&s.ieth.h_dest[2], &guest, 4);
	__builtin_memcpy(s.ieth.h_source, cfg->gw_mac, ETH_ALEN_);
	s.ieth.h_proto = bpf_htons(ETH_P_IP_);
	if (bpf_skb_store_bytes(skb, 0, &s, sizeof(s), 0)) {
		hc_count(HC_STAT_DROP_HEADROOM, len);
		return TC_ACT_SHOT;
	}
	skb->mark = 0;
	hc_count(HC_STAT_PROBE_TX, len);
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return bpf_redirect_neigh(fib.ifindex, NULL, 0, 0);
	return bpf_redirect(fib.ifindex, 0);
}

#endif
