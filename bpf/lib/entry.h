/* entry.h: the prologue of the XDP entry points (xdp_edge,
 * xdp_agent_underlay, xdp_agent_guest): Ethernet, its VLAN tags and
 * IPv4 parsed into one struct pkt, and the verdict, counted, for every
 * frame that goes no further: malformed (dropped under its reason, as
 * parse.h gives it), IPv6 (parsed and judged by ipv6_frame: dropped under
 * its reason or passed to the kernel) and other non-IPv4 (passed). */
#ifndef AZG_ENTRY_H
#define AZG_ENTRY_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "consts.h"
#include "structs.h"
#include "parse.h"
#include "stats.h"

/* parse_frame's answers besides an XDP action (never negative). */
#define FRAME_IPV4 (-1) /* p holds a valid IPv4 packet: go on */
#define FRAME_ARP (-2)  /* an ARP frame (with FRAME_F_ARP only): p->l3_off is set */
/* ipv6_frame's answer (from AZG_IPV6_PATHS) for NVGRE over IPv6 from a
 * host, the outer headers in the program's scratch: not an XDP action. */
#define FRAME_NVGRE6_IN 0x400

/* ipv6_frame's answer (from AZG_IPV6_PATHS) for a packet to an IPv6 VIP,
 * with the VIP's listener generation in the low 16 bits: not an XDP
 * action, AZG_IPV6_VIP's to judge (edge.c). */
#define FRAME_VIP6 0x10000
/* With FRAME_VIP6 (edge.c): a packet to no IPv6 EIP or VIP while nat mode
 * is on, for the IPv6 VIP path's reply half (lb6_nat_reverse). */
#define FRAME_NAT6 0x20000
/* ipv6_frame's answer (from AZG_IPV6_PATHS) for an ICMPv6 neighbor
 * solicitation: AZG_IPV6_NDP's to answer or pass (edge.c, lib/ndp.h),
 * from the entry's frame (under ipv6_frame's, its stack would pass 512
 * bytes). Below FRAME_VIP6, above any XDP action. */
#define FRAME_NDP 0x8000
/* ipv6_frame's (or AZG_IPV6_VIP's) answer for a packet to a host with an
 * IPv6 underlay address (edge.c ul6_ask): AZG_IPV6_UL6's to send, from
 * the entry's frame. Above every FRAME_VIP6 | FRAME_NAT6 | lgen. */
#define FRAME_UL6 0x40000

/* What a program does with frames that are not IPv4. */
#define FRAME_F_ARP 0x1       /* ARP: FRAME_ARP, the caller answers (else passed as non-IP) */
#define FRAME_F_DROP_IPV6 0x2 /* valid IPv6: dropped, counted as drop_local (else passed, pass_ipv6);
				* on the agent: agent_guest6's (FRAME_GUEST6) */
#define FRAME_F_V6_OFF_LINK 0x4 /* IPv6 from a link-local source off its link: drop_ip6_off_link */
#define FRAME_F_UL6 0x8 /* agent, underlay side: NVGRE over IPv6 to the agent's IPv6 underlay
			* address is AZG_AGENT_UL6_IN's (FRAME_NVGRE6_IN, p its outer headers) */

#ifdef AZG_PROG_AGENT
/* agent.c: a guest's valid IPv6 packet (xdp_agent_guest, whose flags
 * hold FRAME_F_DROP_IPV6): neighbour discovery to the host's kernel, the
 * packet of a guest with an IPv6 EIP translated and encapsulated, the rest
 * dropped (drop_local). Returns its XDP action, counted. Called from the
 * entry's frame, not ipv6_frame's: the stacks of three frames and fib4_miss
 * would pass 512 bytes. */
__noinline int agent_guest6(struct xdp_md *ctx);
/* ipv6_frame's answer for a guest's valid IPv6 packet on the agent: not
 * an XDP action, agent_guest6's to judge. */
#define FRAME_GUEST6 0x100
#endif

/* Every IPv6 frame, parsed (parse_ipv6), judged and counted; returns
 * its XDP action. A valid packet is passed (pass_ipv6: no IPv6 address is
 * ours yet, so BGP, NDP and ICMPv6 to the node reach its kernel), or with
 * FRAME_F_DROP_IPV6 dropped (drop_local; on the agent answered
 * FRAME_GUEST6, for parse_frame to give to agent_guest6); else dropped
 * under its reason: malformed (parse_ipv6), a martian source or
 * destination (drop_ip6_martian) or, with
 * FRAME_F_V6_OFF_LINK, a link-local source off its link
 * (drop_ip6_off_link). A global (separately verified) function with the
 * IPv6 packet (struct pkt6) in its own frame: the IPv4 paths' stack and
 * verifier states are as they were, and an IPv4 packet pays nothing. */
__noinline int ipv6_frame(struct xdp_md *ctx, __u32 flags)
{
	if (!ctx)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	/* The frame's length, as the caller's: nothing changed it yet (and
	 * one argument fewer keeps the IPv4 prologue's registers as they
	 * were). */
	__u64 len = data_end - data;
#ifdef AZG_PROG_AGENT
	/* The agent's: parsed into the per-CPU room (agent_scratch6, its
	 * struct pkt6 first) where agent_guest6 reads it, once. */
	__u32 zero = 0;
	struct pkt6 *p6 = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!p6)
		return count_drop(ctx, STAT_DROP_LOCAL, len);
#define IPV6_FRAME_PARSE parse_ipv6_room
#else
	/* 8-byte aligned: copied in 8-byte words into the IPv6 paths'
	 * rooms (pkt6_copy; the verifier refuses unaligned 8-byte stack
	 * accesses). */
	struct pkt6 frame6 __attribute__((aligned(8))), *p6 = &frame6;
#define IPV6_FRAME_PARSE parse_ipv6
#endif
	/* The Ethernet header and its tags again, here: with the offset an
	 * argument, clang allocated the IPv4 prologue's registers otherwise
	 * (one more instruction on its drop path). */
	int rc = parse_eth(data, data_end, &p6->p);
	if (!rc)
		rc = IPV6_FRAME_PARSE(data, data_end, p6);
	if (!rc && (ipv6_martian_src(p6) || ipv6_martian_dst(p6)))
		rc = STAT_DROP_IP6_MARTIAN;
	if (!rc && (flags & FRAME_F_V6_OFF_LINK) && ipv6_off_link(p6))
		rc = STAT_DROP_IP6_OFF_LINK;
#ifdef AZG_IPV6_PATHS
	/* The program's own IPv6 paths (edge.c: the IPv6 EIPs): an XDP
	 * action, or a negative number for a packet that is none of theirs. */
	if (!rc) {
		int act = AZG_IPV6_PATHS(ctx, p6);
		if (act >= 0)
			return act;
	}
#endif
#ifdef AZG_IPV6_NOT_OURS
	/* A valid packet none of the program's IPv6 paths took: the
	 * program's word on it before the kernel's (edge.c: nothing to its
	 * IPv6 health-check address outside the tunnel), 0 or a drop
	 * reason. */
	if (!rc)
		rc = AZG_IPV6_NOT_OURS(p6, len);
#endif
#ifdef AZG_PROG_AGENT
	if (!rc && (flags & FRAME_F_DROP_IPV6))
		return FRAME_GUEST6;
#endif
	if (!rc && (flags & FRAME_F_DROP_IPV6))
		rc = STAT_DROP_LOCAL;
	if (rc)
		return count_drop(ctx, rc, len);
	return count_pass(ctx, STAT_PASS_IPV6, len);
}

/* Parses the frame (len bytes) from data into p. Returns FRAME_IPV4,
 * FRAME_ARP or the XDP action for the frame, already counted. flags is a
 * constant of each caller: the checks it turns off cost nothing. */
static __always_inline int parse_frame(struct xdp_md *ctx, void *data, void *data_end, struct pkt *p, __u64 len, int flags)
{
	int rc = parse_eth(data, data_end, p);
	if (rc)
		return count_drop(ctx, rc, len);
	/* (A global function's answer is any number to the verifier: bounded
	 * here to constants it gives, never FRAME_IPV4. With a program's own
	 * IPv6 paths, AZG_IPV6_PATHS, or the agent's guest side, TX and
	 * REDIRECT too.) */
	if (p->eth_proto == ETH_P_IPV6_) {
#if defined(AZG_IPV6_PATHS)
		int act = ipv6_frame(ctx, flags);
		if (act == XDP_REDIRECT)
			return XDP_REDIRECT;
		if (act == XDP_TX)
			return XDP_TX;
#ifdef AZG_IPV6_VIP
		/* A packet the program's IPv6 paths hand on to its IPv6 VIP
		 * path, from this frame: under ipv6_frame's, its stack would
		 * pass 512 bytes (edge.c lb6_ingress). After the IPv6 EIP
		 * path's answers: it pays no compare for it. */
		if (act >= FRAME_VIP6) {
#ifdef AZG_IPV6_UL6
			/* Either path's packet to a host with an IPv6
			 * underlay address: its tunnel from this frame too. */
			if (act < FRAME_UL6)
				act = AZG_IPV6_VIP(ctx, act & (FRAME_NAT6 | 0xffff));
			if (act == FRAME_UL6)
				act = AZG_IPV6_UL6(ctx);
#else
			act = AZG_IPV6_VIP(ctx, act & (FRAME_NAT6 | 0xffff));
#endif
			if (act == XDP_REDIRECT)
				return XDP_REDIRECT;
			if (act == XDP_TX)
				return XDP_TX;
		}
#endif
#ifdef AZG_IPV6_NDP
		if (act == FRAME_NDP) {
			act = AZG_IPV6_NDP(ctx);
			if (act == XDP_TX)
				return XDP_TX;
		}
#endif
#ifdef AZG_UL6_OUTER
		/* NVGRE over IPv6 from a host: FRAME_IPV4 with p holding
		 * its outer headers as an IPv4 outer header's would be
		 * (GRE to the program's IPv4 underlay address), the host's
		 * name (UL6_HOST) as the source. */
		if (act == FRAME_NVGRE6_IN && AZG_UL6_OUTER(p))
			return FRAME_IPV4;
#endif
		return act == XDP_PASS ? XDP_PASS : XDP_DROP;
#elif defined(AZG_PROG_AGENT)
#if defined(AZG_AGENT_UL6_IN) && defined(AZG_UL6_OUTER)
		/* NVGRE over IPv6 from an edge (agent.c agent_ul6_in, which
		 * parses the packet in its room: ipv6_frame, which the guest
		 * side's IPv6 shares, stays as it was): p its outer headers as
		 * an IPv4 outer header's would be, the edge's name (UL6_HOST)
		 * as the source, for the caller (agent_from_edge); a drop it
		 * counted; anything else ipv6_frame's, as before. */
		if (flags & FRAME_F_UL6) {
			rc = AZG_AGENT_UL6_IN(ctx);
			if (rc == FRAME_NVGRE6_IN && AZG_UL6_OUTER(p))
				return FRAME_NVGRE6_IN;
			if (rc == XDP_DROP)
				return rc; /* (counted by it) */
		}
#endif
		rc = ipv6_frame(ctx, flags);
		if ((flags & FRAME_F_DROP_IPV6) && rc == FRAME_GUEST6) {
			/* (Constants, not rc: clang merged a "return rc" with
			 * the IPv4 path's redirect tail, one more jump there.) */
			rc = agent_guest6(ctx);
			if (rc == XDP_REDIRECT)
				return XDP_REDIRECT;
			if (rc == XDP_TX)
				return XDP_TX;
			return rc == XDP_PASS ? XDP_PASS : XDP_DROP;
		}
		return rc == XDP_PASS ? XDP_PASS : XDP_DROP;
#else
		return ipv6_frame(ctx, flags) == XDP_PASS ? XDP_PASS : XDP_DROP;
#endif
	}
	if ((flags & FRAME_F_ARP) && p->eth_proto == ETH_P_ARP_)
		return FRAME_ARP;
	if (p->eth_proto != ETH_P_IP_)
		return count_pass(ctx, STAT_PASS_NON_IP, len);
	rc = parse_ipv4(data, data_end, p);
	if (rc)
		return count_drop(ctx, rc, len);
	return FRAME_IPV4;
}

#endif
