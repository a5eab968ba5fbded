//go:build ignore

/* agent.c: the azgate host agent data plane (XDP).
 *
 * xdp_agent_underlay, on the host's underlay interface: NVGRE from an edge
 * for an EIP hosted here is decapsulated, its destination translated 1:1
 * from the EIP to the guest's private address, and delivered to the guest;
 * NVGRE for a VIP goes to the backend guest the edge chose, and the flow is
 * recorded in agent_flows (lib/agentflow.h); an IPv6 VIP's in
 * agent_flows6, its backend named by its IPv4 address as an IPv4 VIP's.
 * xdp_agent_guest, on the host side of each guest interface: a guest's
 * packet to the outside is translated by its flow entry (back to the VIP
 * or EIP it came in through) or, with none, to the guest's EIP, and is
 * encapsulated in NVGRE to a live member of the edge set that serves that
 * address (its edge group, agent_groups). A guest without an
 * EIP opens no connection of its own to the outside. */

/* The agent's maps (lib/maps.h). */
#define AZG_PROG_AGENT 1

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "lib/consts.h"
#include "lib/structs.h"
#include "lib/maps.h"
#include "lib/csum.h"
#include "lib/parse.h"
#include "lib/hash.h"
#include "lib/stats.h"
/* NVGRE over IPv6 from an edge (the IPv6 underlay; defined below): judged
 * in entry.h's ipv6_frame (agent_ul6_in), its outer headers then copied
 * into xdp_agent_underlay's struct pkt (agent_ul6_outer) as an IPv4 outer
 * header's, for agent_from_edge. */
__noinline int agent_ul6_in(struct xdp_md *ctx);
#define AZG_AGENT_UL6_IN agent_ul6_in
static __always_inline int agent_ul6_outer(struct pkt *p);
#define AZG_UL6_OUTER agent_ul6_outer
#include "lib/entry.h"
#include "lib/nvgre.h"
#include "lib/icmp.h"
#include "lib/fib.h"
#include "lib/nat.h"
#include "lib/bw.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The flow table. */
#include "lib/agentflow.h"
/* Health checks from the edges (lib/agenthc.h). */
#include "lib/agenthc.h"

/* The service entry for a packet to a VIP: the guest the edge chose is in
 * the inner destination MAC (02:01 + its address); the port is the
 * packet's destination port, or for an ICMP error the source port of the
 * packet it quotes. */
static __always_inline struct svc_entry *svc_lookup(void *data, void *data_end, const struct pkt *in,
						     struct svc_key *k, __be16 *vport, int *icmp)
{
	struct ethhdr *ieth = data + OFF(in->l3_off - ETH_HLEN_);
	if ((void *)(ieth + 1) > data_end)
		return NULL;
	if (ieth->h_dest[0] != SVC_MAC0 || ieth->h_dest[1] != SVC_MAC1)
		return NULL;
	__builtin_memset(k, 0, sizeof(*k));
	k->vip = in->daddr;
	__builtin_memcpy(&k->guest, &ieth->h_dest[2], 4);
	k->proto = in->proto;
	*icmp = 0;
	*vport = pkt_dport(in);
	if (in->proto == IPPROTO_ICMP_ && in->l4_ok) {
		struct icmphdr_ *ih = data + OFF(in->l4_off);
		if ((void *)(ih + 1) > data_end || !icmp_is_error(ih->type))
			return NULL;
		__be32 qs, qd;
		__be16 qsp, qdp;
		__u8 qp;
		if (icmp_quoted_flow(ih, data_end, in->ip_len - (in->l4_off - in->l3_off), &qs, &qd, &qsp, &qdp, &qp) || qs != in->daddr)
			return NULL;
		k->proto = qp;
		*vport = qsp;
		*icmp = 1;
	}
	k->vport = *vport;
	struct svc_entry *e = bpf_map_lookup_elem(&agent_svc, k);
	if (e)
		return e;
	k->vport = 0;
	return bpf_map_lookup_elem(&agent_svc, k);
}

/* IPv6 EIPs (NAT66, 1:1): the guest's private IPv6 address <-> its IPv6
 * EIP, over the IPv4 underlay (the inner Ethernet frame's ethertype is
 * 0x86DD); and IPv6 VIPs (encap mode): the VIP and port <-> the backend
 * guest's IPv6 address and backend port, each flow recorded in
 * agent_flows6 for its replies. Global (separately verified) functions,
 * reached only by IPv6: the IPv4 paths' stack and verifier states are as
 * they were. */

/* Rewrites the source (dst 0) or destination (dst 1) address of the IPv6
 * packet p6 describes to *to, its old value *from, and the upper-layer
 * checksum (TCP, UDP, ICMPv6: each covers a pseudo-header with both
 * addresses) incrementally (RFC 1624). A later fragment carries no
 * upper-layer header: only its address changes. UDP's checksum is
 * mandatory in IPv6 (RFC 8200 8.1): a zero one, which every receiver
 * discards, is refused (drop_ip6_udp_csum0) rather than computed over
 * the payload; a computed zero is sent as 0xffff. Returns 0 or the drop
 * reason. */
static __always_inline int nat6(void *data, void *data_end, const struct pkt6 *p6, int dst,
				const __be32 *from, const __be32 *to)
{
	struct ipv6hdr *ip6 = data + OFF(p6->p.l3_off);
	if ((void *)(ip6 + 1) > data_end)
		return STAT_DROP_IP_TRUNC;
	if (p6->p.l4_ok) {
		__u32 coff;
		if (p6->p.proto == IPPROTO_TCP_)
			coff = 16;
		else if (p6->p.proto == IPPROTO_UDP_)
			coff = 6;
		else if (p6->p.proto == IPPROTO_ICMPV6_)
			coff = 2;
		else
			coff = 0xff;
		if (coff != 0xff) {
			__sum16 *c = data + OFF(p6->p.l4_off) + (coff & 0x1f);
			if ((void *)(c + 1) > data_end)
				return STAT_DROP_L4_TRUNC;
			__u16 check = *c;
			if (p6->p.proto == IPPROTO_UDP_ && check == 0)
				return STAT_DROP_IP6_UDP_CSUM0;
			check = csum_replace16(check, from, to);
			if (p6->p.proto == IPPROTO_UDP_ && check == 0)
				check = 0xffff;
			*c = check;
		}
	}
	if (dst)
		__builtin_memcpy(&ip6->daddr, to, 16);
	else
		__builtin_memcpy(&ip6->saddr, to, 16);
	return 0;
}

/* The value of agent_scratch6 (lib/maps.h): per-CPU room for the IPv6
 * paths' packet, FIB request and MACs, off the 512-byte stack:
 * agent_from_edge6 runs beneath agent_from_edge's frame, agent_guest6
 * beneath xdp_agent_guest's, each with less than 200 bytes left. */
struct agent_room6 {
	struct pkt6 p6;
	struct fib_room fib; /* a struct bpf_fib_lookup */
	struct eip_key k;
	__u8 ours[ETH_ALEN_];
	__u8 peer[ETH_ALEN_];
	/* agent_from_edge6's values (its frame is small: beneath
	 * agent_from_edge's). */
	__u32 vsid;
	__u32 outer_end;
	__u32 idx;
	__s32 rc;
	/* IPv6 VIPs: the service key, the flow's key and entry (noted on
	 * the way in, looked up on the way out), and what the packet is
	 * translated by. */
	struct svc6_key sk;
	struct agent_flow6_key fk;
	struct agent_flow6 fv;
	__be16 bport; /* the backend port (0: kept) */
	__u8 note;    /* NOTE6_*; agent_guest6: GUEST6_* */
	__u8 quoted;  /* agent_guest6: an ICMPv6 error whose quote agent_quote6 translates (a VIP flow's,
		       * looked up by the flow it quotes, or an IPv6 EIP's: eip6_quoted) */
	__u32 qoff;   /* an ICMPv6 error's quote's offset (icmp6_quote_off) */
	__u32 hash;   /* agent_guest6: the flow hash */
	struct hc_guest6_key hk; /* agent_from_edge6: an edge's IPv6 health check (lib/agenthc.h) */
	/* NVGRE over IPv6 from an edge: its outer headers (agent_ul6_in,
	 * for agent_ul6_outer), the edge's name as the source. */
	struct ul6_outer ulo;
	/* agent_fib6's and agent_push6's key of ul6_hosts (an edge's name)
	 * and the guest's MAC: off their frames, beneath agent_guest6's. */
	struct ip_addr ul6key;
	__u8 ul6mac[ETH_ALEN_];
	/* icmp6_error's (lib/icmp6.h): an IPv6 guest's packet too big for
	 * the tunnel, answered by agent_guest6. */
	struct icmp6_room icmp6;
};
_Static_assert(__builtin_offsetof(struct agent_room6, p6) == 0, "ipv6_frame (lib/entry.h) parses into the room's p6");
_Static_assert(__builtin_offsetof(struct agent_room6, peer) == __builtin_offsetof(struct agent_room6, ours) + ETH_ALEN_,
	       "mac2_copy copies ours and peer as one 12-byte pair");

/* The agent's ICMPv6 errors (lib/icmp6.h): packet too big to an IPv6
 * guest, kept in agent_scratch6.icmp6, from agent_config.icmp_src6 (the
 * daemon writes --icmp-source6 there, else the host's IPv6 underlay
 * address, as IPv4's fragmentation needed comes from its IPv4 underlay
 * address); :: (a host of the IPv4 underlay without --icmp-source6)
 * sends none: its IPv6 guests' packets too big for the tunnel are
 * drop_too_big. */
static __always_inline struct icmp6_room *icmp6_room_get(void)
{
	__u32 zero = 0;
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	return r ? &r->icmp6 : NULL;
}

static __always_inline const struct ip_addr *icmp6_src_get(const __u32 *zero)
{
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, zero);
	return cfg ? &cfg->icmp_src6 : NULL;
}
#include "lib/icmp6.h"

/* The IPv6 underlay (issue 21). An edge the agent reaches over IPv6 is
 * named, in every 4-byte field that names an edge (agent_edge_set,
 * agent_groups' edges, agent_flows' and agent_flows6' edge), by its name
 * in ul6_hosts (0.0.0.0/8 + an index, UL6_HOST), as the edge names its
 * IPv6 hosts: the IPv4 entries keep their size and meaning. */

/* entry.h's AZG_AGENT_UL6_IN, from parse_frame for every IPv6 frame on
 * the underlay side (FRAME_F_UL6), before ipv6_frame: the packet parsed
 * into the room (ipv6_frame, whose frame the guest side's IPv6 shares,
 * stays as it was). A packet that is not GRE to the agent's IPv6 underlay
 * address (agent_config.underlay6; :: none), malformed or martian: -1,
 * ipv6_frame's to judge and count as before (the kernel's, or the
 * parser's drop). Else it must come from an edge's IPv6 address
 * (ul6_hosts: its name, else drop_spoof) with no extension header between
 * the outer IPv6 header and GRE (drop_gre_bad: a tunnel's packet carries
 * none, a fragment header included): XDP_DROP, counted. Its outer headers
 * go to the room for agent_ul6_outer and the answer is FRAME_NVGRE6_IN:
 * agent_from_edge takes it as NVGRE over IPv4 from the edge's name
 * (agent_edge_set, then the GRE header, the inner frame, VSID and guest,
 * under the IPv4 outer's counters). */
__noinline int agent_ul6_in(struct xdp_md *ctx)
{
	if (!ctx)
		return -1;
	__u32 zero = 0;
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!cfg || !r)
		return -1;
	/* A host of the IPv4 underlay: nothing parsed twice. */
	if (!(cfg->underlay6.a[0] | cfg->underlay6.a[1] | cfg->underlay6.a[2] | cfg->underlay6.a[3]))
		return -1;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct pkt6 *p6 = &r->p6;
	if (parse_eth(data, data_end, &p6->p) || p6->p.eth_proto != ETH_P_IPV6_ || parse_ipv6(data, data_end, p6) ||
	    ipv6_martian_src(p6) || ipv6_martian_dst(p6) || p6->p.proto != IPPROTO_GRE_)
		return -1;
	if (p6->daddr.a[0] != cfg->underlay6.a[0] || p6->daddr.a[1] != cfg->underlay6.a[1] ||
	    p6->daddr.a[2] != cfg->underlay6.a[2] || p6->daddr.a[3] != cfg->underlay6.a[3])
		return -1;
	struct ip_addr *name = bpf_map_lookup_elem(&ul6_hosts, &p6->saddr);
	if (!name || !UL6_HOST(name->a[0]) || !name->a[0])
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	if (p6->p.l4_off != p6->p.l3_off + 40)
		return count_drop(ctx, STAT_DROP_GRE_BAD, len);
	struct ul6_outer *o = &r->ulo;
	o->host = name->a[0];
	o->daddr = 0;
	o->l3_off = p6->p.l3_off;
	o->l4_off = p6->p.l4_off;
	o->ip_len = p6->p.ip_len;
	o->frag = p6->p.frag;
	return FRAME_NVGRE6_IN;
}

/* entry.h's AZG_UL6_OUTER: p as agent_from_edge reads NVGRE's outer
 * headers, from agent_ul6_in's. Returns 0 without them. */
static __always_inline int agent_ul6_outer(struct pkt *p)
{
	__u32 zero = 0;
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!r)
		return 0;
	ul6_outer_pkt(p, &r->ulo);
	return 1;
}

/* The route to the edge named to (UL6_HOST: fib4c's FIB_RET_UL6) over
 * the IPv6 underlay, as fib4c's to an IPv4 edge: from the agent's IPv6
 * underlay address to the edge's (ul6_hosts), through nh_cache6, the
 * flow label (the flow hash's low 20 bits) as the kernel's multipath hash
 * reads it, tot_len the IPv4 tunnel's length (the inner packet and
 * NVGRE_OVERHEAD) checked with the 20 bytes more the IPv6 outer costs. On
 * FRAG_NEEDED fib->mtu_result is the route's MTU less those 20 bytes, so
 * the caller's one formula (less NVGRE_OVERHEAD) gives the inner packet's
 * MTU over either family. No IPv6 underlay address or no address for the
 * name: BPF_FIB_LKUP_RET_NOT_FWDED (drop_fib). Global: its callers'
 * frames have no bytes to spare. */
__noinline int agent_fib6(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __be32 to, __u32 tot_len, __u32 hash)
{
	if (!ctx || !fib)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	__u32 zero = 0;
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!cfg || !r)
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	struct ip_addr *k = &r->ul6key;
	k->a[0] = to;
	k->a[1] = k->a[2] = k->a[3] = 0;
	struct ip_addr *dst = bpf_map_lookup_elem(&ul6_hosts, k);
	if (!dst || !(dst->a[0] | dst->a[1] | dst->a[2] | dst->a[3]) ||
	    !(cfg->underlay6.a[0] | cfg->underlay6.a[1] | cfg->underlay6.a[2] | cfg->underlay6.a[3]))
		return BPF_FIB_LKUP_RET_NOT_FWDED;
	int rc = fib6f(ctx, fib, cfg->nh_gen, &cfg->underlay6, dst, (tot_len + NVGRE6_OVERHEAD - NVGRE_OVERHEAD) & 0xffff,
		       IPPROTO_GRE_, bpf_htonl(hash & 0xfffff), 0, hash);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		fib->mtu_result = fib->mtu_result > NVGRE6_OVERHEAD - NVGRE_OVERHEAD
					  ? fib->mtu_result - (NVGRE6_OVERHEAD - NVGRE_OVERHEAD)
					  : 0;
	return rc;
}

/* AGENT_PUSH6's packing of agent_push6's arguments (five at most). */
#define AGENT_PUSH6_PKT(l3_off, ip_len, tos, eproto)                                                     \
	((__u64)(l3_off) | (__u64)(ip_len) << 16 | (__u64)(tos) << 32 | (__u64)(eproto) << 48)
#define AGENT_PUSH6_KEY(key, hash) ((__u64)(key) | (__u64)((hash) & 0xfffff) << 32)

/* nvgre_to over the IPv6 underlay, to the edge named to, once agent_fib6
 * resolved fib: the packet (pkt: AGENT_PUSH6_PKT of its offset, length,
 * TOS and inner ethertype, network order) in NVGRE over IPv6 from the
 * agent's IPv6 underlay address to the edge's (lib/nvgre.h nvgre6_push:
 * hop limit OUTER_TTL, traffic class the TOS), the GRE key and flow label
 * AGENT_PUSH6_KEY's, the inner frame from the guest's MAC (the frame's
 * source) to the gateway MAC. Returns 0, or the drop reason (the name gone
 * since agent_fib6: drop_fib; the frame not resized: drop_headroom). */
__noinline int agent_push6(struct xdp_md *ctx, const struct bpf_fib_lookup *fib, __be32 to, __u64 pkt, __u64 kl)
{
	if (!ctx || !fib)
		return STAT_DROP_FIB;
	__u32 zero = 0;
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!cfg || !r)
		return STAT_DROP_FIB;
	struct ip_addr *k = &r->ul6key;
	k->a[0] = to;
	k->a[1] = k->a[2] = k->a[3] = 0;
	struct ip_addr *dst = bpf_map_lookup_elem(&ul6_hosts, k);
	if (!dst)
		return STAT_DROP_FIB;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return STAT_DROP_ETH_TRUNC;
	/* The guest's MAC is the frame's: kept aside, the push moves it. */
	__builtin_memcpy(r->ul6mac, eth->h_source, ETH_ALEN_);
	if (nvgre6_push(ctx, pkt & 0xff, (pkt >> 16) & 0xffff, fib->dmac, fib->smac, &cfg->underlay6, dst, (__u32)kl,
			(pkt >> 32) & 0xff, kl >> 32, cfg->gw_mac, r->ul6mac, (pkt >> 48) & 0xffff))
		return STAT_DROP_HEADROOM;
	return 0;
}

/* What agent_from_edge6 records in agent_flows6 (lib/agentflow.h's rules
 * for agent_flows). */
#define NOTE6_NONE 0 /* an IPv6 EIP whose guest serves no IPv6 VIP */
#define NOTE6_EIP 1  /* an IPv6 EIP whose guest serves an IPv6 VIP too: a SYN takes a VIP flow's entry over */
#define NOTE6_EIP_QUOTE 2 /* an ICMPv6 error about an IPv6 EIP's flow (eip6_quoted): its quote translated */
#define NOTE6_SVC 4  /* an IPv6 VIP: its first packet writes the entry */
#define NOTE6_QUOTE 6 /* an ICMPv6 error about an IPv6 VIP flow: no entry, its quote translated (agent_quote6) */
/* In a note: the quote of the ICMPv6 error is translated (V6_QUOTE); an
 * IPv6 EIP's notes are below NOTE6_SVC, a VIP's from it. */
#define NOTE6_F_QUOTE 2
/* agent_guest6's note: the packet leaves through the guest's IPv6 EIP
 * (its counters), and the EIP has a bandwidth limit. */
#define GUEST6_EIP 1
#define GUEST6_BW 2
/* and it goes to an edge of the IPv6 underlay (agent_fib6 resolved the
 * name it left in the room's ul6key). */
#define GUEST6_UL6 4

/* Rewrites the source (dst 0) or destination (dst 1) port of the TCP or
 * UDP packet p6 describes to to, and its checksum (nat6 has refused a
 * zero UDP one; a computed zero is sent as 0xffff). Returns 0 or the drop
 * reason. */
static __always_inline int nat6_port(void *data, void *data_end, const struct pkt6 *p6, int dst, __be16 to)
{
	if (!p6->p.l4_ok || p6->p.frag)
		return 0;
	if (p6->p.proto != IPPROTO_TCP_ && p6->p.proto != IPPROTO_UDP_)
		return 0;
	__be16 *ports = data + OFF(p6->p.l4_off);
	if ((void *)(ports + 2) > data_end)
		return STAT_DROP_L4_TRUNC;
	__u32 coff = p6->p.proto == IPPROTO_TCP_ ? 16 : 6;
	__sum16 *c = data + OFF(p6->p.l4_off) + (coff & 0x1f);
	if ((void *)(c + 1) > data_end)
		return STAT_DROP_L4_TRUNC;
	__be16 from = dst ? ports[1] : ports[0];
	if (dst)
		ports[1] = to;
	else
		ports[0] = to;
	__u16 check = csum_replace2(*c, from, to);
	if (p6->p.proto == IPPROTO_UDP_ && check == 0)
		check = 0xffff;
	*c = check;
	return 0;
}

/* Whether two IPv6 addresses are the same. */
static __always_inline int addr6_eq(const __be32 *a, const __be32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* Whether the packet p6 describes is an ICMPv6 error (RFC 4443 types 1-4:
 * destination unreachable, packet too big, time exceeded, parameter
 * problem) about an IPv6 EIP's flow, whose quote the agent translates as
 * IPv4's nat4 translates an EIP's (nat_icmp_quote): out 0, from the
 * Internet, a quote from the error's destination (the EIP); out 1, from
 * the guest, a quote to the error's source (the guest's address).
 * Returns 1 (r->qoff says where the quote is, r->bport is 0: agent_quote6
 * translates the address alone), 0 (no error, a later fragment, or a
 * quote about another address: left alone, as nat_icmp_quote leaves it)
 * or -1: an error whose quote is truncated, shorter than its IPv6 header
 * and 4 bytes past it within the packet (icmp6_quote_off; IPv4's caller
 * drops a quote without its header). */
static __always_inline int eip6_quoted(void *data, void *data_end, struct agent_room6 *r, const struct pkt6 *p6,
				       const int out)
{
	if (p6->p.proto != IPPROTO_ICMPV6_ || !p6->p.l4_ok || p6->p.frag)
		return 0;
	__u8 *ih = data + OFF(p6->p.l4_off);
	if ((void *)(ih + 1) > data_end || ih[0] == 0 || ih[0] > 4)
		return 0;
	r->qoff = icmp6_quote_off(data, data_end, p6);
	struct ipv6hdr *q = data + OFF(r->qoff);
	if (!r->qoff || (void *)(q + 1) > data_end)
		return -1;
	if (!addr6_eq(out ? q->daddr.in6_u.u6_addr32 : q->saddr.in6_u.u6_addr32, out ? p6->saddr.a : p6->daddr.a))
		return 0;
	r->bport = 0;
	return 1;
}

/* Whether two IPv6 flow entries say the same (flow_same's IPv6 twin). */
static __always_inline int flow6_same(const struct agent_flow6 *a, const struct agent_flow6 *b)
{
	return a->pub.a[0] == b->pub.a[0] && a->pub.a[1] == b->pub.a[1] && a->pub.a[2] == b->pub.a[2] &&
	       a->pub.a[3] == b->pub.a[3] && a->pport == b->pport && a->edge == b->edge && a->vsid == b->vsid &&
	       a->ifindex == b->ifindex && a->gen == b->gen && a->group == b->group;
}

/* flow_note_in (lib/agentflow.h) for agent_flows6, inlined in
 * agent_from_edge6 (which calls no function) over its room: the key is
 * the reply's 5-tuple (the guest's address k.addr, the backend port
 * r->bport or the packet's), the entry r->fv (its group and interface
 * already set) completed from the packet in and the edge. Returns 1 when
 * it wrote. */
static __always_inline int flow6_note_in(struct agent_room6 *r, const struct pkt6 *in, __be32 edge)
{
	struct agent_flow6_key *fk = &r->fk;
	struct agent_flow6 *fv = &r->fv;
	__u32 gi = fv->group;
	__u16 gen = 0;
	struct agent_group *grp = bpf_map_lookup_elem(&agent_groups, &gi);
	if (grp)
		gen = grp->gen;
	int tcp = in->p.proto == IPPROTO_TCP_;
	int syn = tcp && (in->p.tcp_flags & 0x12) == 0x02;
	__be16 dport = pkt_dport(&in->p);
	fk->guest = r->k.addr;
	fk->remote = in->saddr;
	fk->gport = r->bport ? r->bport : dport;
	fk->rport = pkt_sport(&in->p);
	fk->proto = in->p.proto;
	fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
	fv->pub = in->daddr;
	fv->edge = edge;
	fv->pport = dport;
	fv->gen = gen;
	fv->vsid = r->vsid;
	fv->pad = 0;
	struct agent_flow6 *cur = bpf_map_lookup_elem(&agent_flows6, fk);
	if (cur) {
		if (flow6_same(cur, fv))
			return 0;
		/* Another public address: only a new connection takes the
		 * 5-tuple over (a forged packet must not flip the replies). */
		if ((cur->pub.a[0] != fv->pub.a[0] || cur->pub.a[1] != fv->pub.a[1] || cur->pub.a[2] != fv->pub.a[2] ||
		     cur->pub.a[3] != fv->pub.a[3] || cur->pport != fv->pport) &&
		    !syn)
			return 0;
		__builtin_memcpy(cur, fv, sizeof(*cur));
		return 1;
	}
	if (r->note != NOTE6_SVC || (tcp && !syn))
		return 0;
	return bpf_map_update_elem(&agent_flows6, fk, fv, BPF_ANY) == 0;
}

/* agent_from_edge6's verdict: V6_VERDICT(the XDP action, the counter its
 * caller moves). */
#define V6_VERDICT(action, stat) ((stat) << 8 | (action))
/* With the verdict: the delivered frame is an ICMPv6 error about a VIP
 * flow whose quote agent_quote6 must translate. */
#define V6_QUOTE (1 << 30) /* (or about an IPv6 EIP's flow: NOTE6_F_QUOTE) */

/* agent_from_edge6's delivery once its route is known: the destination
 * (and a VIP's backend port) translated, the frame stripped to the inner
 * one and sent. Inlined twice with note a constant for an IPv6 EIP whose
 * guest serves no IPv6 VIP (NOTE6_NONE: no VIP check left on its path)
 * and r->note for the rest. */
static __always_inline int from_edge6_deliver(struct xdp_md *ctx, struct agent_room6 *r, struct pkt6 *in,
					      struct bpf_fib_lookup *fib, __u8 note)
{
	struct eip_key *k = &r->k;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 reason = nat6(data, data_end, in, 1, in->daddr.a, k->addr.a);
	if (reason)
		goto drop;
	/* An ICMPv6 error's quote is translated once the frame is stripped
	 * (agent_quote6: its room, this frame has no bytes left); a port is
	 * a TCP or UDP packet's. */
	if (note >= NOTE6_SVC && r->bport && note != NOTE6_QUOTE) {
		reason = nat6_port(data, data_end, in, 1, r->bport);
		if (reason)
			goto drop;
	}
	reason = STAT_DROP_INNER_BAD;

	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		goto drop;
	mac2_copy(r->ours, oeth->h_dest); /* and r->peer, oeth->h_source */
	reason = STAT_DROP_HEADROOM;
	if (nvgre_strip(ctx, &in->p))
		goto drop;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		goto drop;

	struct eip_stats *es = note >= NOTE6_SVC ? NULL : bpf_map_lookup_elem(&eip_stats, &r->idx);
	if (es) {
		es->rx_packets++;
		es->rx_bytes += in->p.ip_len;
	}
	if (r->rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		mac2_copy(eth->h_dest, r->ours); /* and h_source, r->peer */
		return V6_VERDICT(XDP_PASS, STAT_DECAP_PASS) | ((note & NOTE6_F_QUOTE) ? V6_QUOTE : 0);
	}
	mac_copy(eth->h_dest, fib->dmac);
	mac_copy(eth->h_source, fib->smac);
	return V6_VERDICT(xmit(ctx, fib->ifindex), STAT_DECAP_TX) | ((note & NOTE6_F_QUOTE) ? V6_QUOTE : 0);
drop:
	return V6_VERDICT(XDP_DROP, reason);
}

/* NVGRE from an edge (already checked: agent_edge_set) that nvgre_pull
 * refused as drop_inner_bad: the outer headers parsed again, an inner
 * frame that is not IPv6 drop_inner_bad; the IPv6 packet parsed (any fault,
 * a martian source included, is drop_inner_bad, as nvgre_pull says for
 * IPv4), a hop limit of 0 dropped (drop_ttl), the destination looked up
 * as an IPv6 EIP, else as an IPv6 VIP (agent_svc6: the VIP, the backend
 * guest's IPv4 address from the inner destination MAC, SVC_MAC + the
 * address, the destination port or any; none, or another VSID:
 * drop_unknown), translated to the guest's private IPv6 address (and a
 * VIP's backend port) and delivered as the IPv4 path delivers (the FIB's
 * next hop, to the kernel while its neighbour is unresolved). A VIP's
 * flow is recorded in agent_flows6 (flow6_note_in: a TCP SYN or any UDP
 * packet writes its entry, flow_new), as is an IPv6 EIP's SYN to a guest
 * that also serves an IPv6 VIP (AGENT_F_SVC), which takes a VIP flow's
 * entry on its 5-tuple over; a VIP's packet moves no EIP counter. An
 * ICMPv6 error about a VIP flow (its quote a TCP or UDP packet from the
 * VIP: the service is the quote's port) is delivered with its quote
 * translated (V6_QUOTE: agent_quote6, after the strip), as is an ICMPv6
 * error to an IPv6 EIP whose quote is from the EIP (NOTE6_EIP_QUOTE,
 * eip6_quoted: its quoted source becomes the guest's address; a truncated
 * quote drop_inner_bad). Returns
 * V6_VERDICT(the XDP action, the counter its caller, agent_pull_failed,
 * moves): it calls no function of its own
 * (drop_counted, mon_emit), whose frames, beneath xdp_agent_underlay's,
 * agent_from_edge's and agent_pull_failed's, would pass 512 bytes; its
 * own frame must stay within 96 bytes. */
__noinline int agent_from_edge6(struct xdp_md *ctx, const struct pkt *o)
{
	if (!ctx || !o)
		return V6_VERDICT(XDP_ABORTED, STAT_DROP_INNER_BAD);
	__u32 zero = 0;
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!r)
		return V6_VERDICT(XDP_DROP, STAT_DROP_INNER_BAD);
	__u32 reason = STAT_DROP_INNER_BAD;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pkt6 *in = &r->p6;
	/* The outer headers as agent_from_edge parsed them (its struct pkt,
	 * passed by pointer: its values as arguments changed agent_from_edge's
	 * IPv4 code, the pointer does not). */
	r->outer_end = o->l3_off + o->ip_len;
	__u32 l4_off = o->l4_off;
	struct gre_key_hdr *gre = data + OFF(l4_off);
	struct ethhdr *ieth = data + OFF(l4_off + GRE_HLEN_KEY);
	if ((void *)(gre + 1) > data_end || (void *)(ieth + 1) > data_end || ieth->h_proto != bpf_htons(ETH_P_IPV6_))
		goto drop;
	r->vsid = bpf_ntohl(gre->key) >> 8;
	in->p.l3_off = OFF(l4_off + GRE_HLEN_KEY) + ETH_HLEN_;
	if (parse_ipv6(data, data_end, in) || ipv6_martian_src(in))
		goto drop;
	/* (Read the parsed fields from the room again: kept by clang they
	 * were spilled, past the frame this function may have.) */
	__asm__ __volatile__("" ::: "memory");
	if (in->p.l3_off + in->p.ip_len > r->outer_end)
		goto drop;
	reason = STAT_DROP_TTL;
	if (in->p.ttl == 0)
		goto drop;

	struct eip_key *k = &r->k;
	k->addr = in->daddr;
	k->family = AF_INET6_;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
	struct agent_eip *e = bpf_map_lookup_elem(&agent_eips, k);
	reason = STAT_DROP_UNKNOWN;
	struct agent_flow6 *fv = &r->fv;
	if (e) {
		if (e->vsid != r->vsid || e->family != AF_INET6_)
			goto drop;
		r->idx = e->stats_idx;
		r->note = NOTE6_NONE;
		if (e->flags & AGENT_F_SVC) {
			r->note = NOTE6_EIP;
			r->bport = 0;
			fv->group = e->group;
			fv->ifindex = 0;
		}
		/* An ICMPv6 error about the EIP's flow: its quote from the EIP
		 * is translated too (NOTE6_EIP_QUOTE, V6_QUOTE: agent_quote6
		 * after the strip, as a VIP's), one about another address
		 * delivered as it is, one with a truncated quote drop_inner_bad
		 * (IPv4's nat4 and its caller). Not a flow's packet: no entry. */
		if (in->p.proto == IPPROTO_ICMPV6_) {
			/* (The frame's bounds read again: kept live from the
			 * top, they cost every IPv6 EIP packet spills.) */
			int qt = eip6_quoted((void *)(long)ctx->data, (void *)(long)ctx->data_end, r, in, 0);
			if (qt < 0) {
				reason = STAT_DROP_INNER_BAD;
				goto drop;
			}
			if (qt)
				r->note = NOTE6_EIP_QUOTE;
		}
		/* The private address, kept in the room (the key is read no
		 * more; the EIP's entry may change under us): the FIB request
		 * cannot hold it, the kernel writes a gateway's address there,
		 * and a cache hit asks no request. */
		k->addr = e->private_addr;
	} else {
		/* An IPv6 VIP: the backend guest the edge chose is in the inner
		 * destination MAC (SVC_MAC + its IPv4 address), the port the
		 * packet's destination port (vport 0: a service on every port),
		 * as svc_lookup for IPv4 VIPs. */
		struct svc6_key *sk = &r->sk;
		struct ethhdr *ieth = data + OFF(in->p.l3_off - ETH_HLEN_);
		if ((void *)(ieth + 1) > data_end)
			goto drop;
		if (ieth->h_dest[0] != SVC_MAC0 || ieth->h_dest[1] != SVC_MAC1) {
			/* Not a VIP's: an edge's health check of a guest's
			 * own IPv6 address (lib/agenthc.h), or nothing. It goes
			 * as an IPv6 VIP's packet would, the guest's address in
			 * the VIP's place: delivered untranslated (no backend
			 * port), its flow recorded (a SYN or any UDP packet
			 * writes the entry) pinned to the edge that sent it
			 * (AGENT_GROUP_PIN), from the guest's interface. */
			struct hc_guest6 *hg = hc6_guest(in, r->vsid, &r->hk);
			if (!hg)
				goto drop;
			r->note = NOTE6_SVC;
			r->bport = 0;
			fv->group = AGENT_GROUP_PIN;
			fv->ifindex = hg->ifindex;
			k->addr = in->daddr;
			goto routed;
		}
		__builtin_memcpy(&sk->guest, &ieth->h_dest[2], 4);
		sk->vip = in->daddr;
		sk->proto = in->p.proto;
		sk->pad = 0;
		sk->vport = pkt_dport(&in->p);
		/* An ICMPv6 error about a VIP flow quotes the VIP's packet to
		 * the client: the service is the quote's protocol and source
		 * port, and the quote must be from the VIP. */
		r->note = NOTE6_SVC;
		if (in->p.proto == IPPROTO_ICMPV6_) {
			r->qoff = icmp6_quote_off(data, data_end, in);
			struct ipv6hdr *q = data + OFF(r->qoff);
			__be16 *qp = data + OFF(r->qoff + 40);
			if (!r->qoff || (void *)(q + 1) > data_end || (void *)(qp + 2) > data_end)
				goto drop;
			if (q->nexthdr != IPPROTO_TCP_ && q->nexthdr != IPPROTO_UDP_)
				goto drop;
			if (q->saddr.in6_u.u6_addr32[0] != in->daddr.a[0] || q->saddr.in6_u.u6_addr32[1] != in->daddr.a[1] ||
			    q->saddr.in6_u.u6_addr32[2] != in->daddr.a[2] || q->saddr.in6_u.u6_addr32[3] != in->daddr.a[3])
				goto drop;
			sk->proto = q->nexthdr;
			sk->vport = qp[0];
			r->note = NOTE6_QUOTE;
		}
		struct svc6_entry *se = bpf_map_lookup_elem(&agent_svc6, sk);
		if (!se) {
			sk->vport = 0;
			se = bpf_map_lookup_elem(&agent_svc6, sk);
		}
		if (!se || se->vsid != r->vsid)
			goto drop;
		r->bport = se->bport;
		fv->group = se->group;
		fv->ifindex = se->ifindex;
		k->addr = se->guest6;
	}
routed:;

	/* The guest's route, through the IPv6 next-hop cache (lib/fib.h
	 * fib6f, its miss inlined: this function calls none), bucket 0 as
	 * the agent's IPv4 paths. */
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	if (!cfg)
		goto drop;
	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&r->fib;
	r->rc = fib6f(ctx, fib, cfg->nh_gen, &in->saddr, &k->addr, in->p.ip_len, in->p.proto, 0, 0, 0);
	reason = STAT_DROP_TOO_BIG;
	if (r->rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		goto drop;
	reason = STAT_DROP_FIB;
	if (r->rc != BPF_FIB_LKUP_RET_SUCCESS && r->rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		goto drop;

	/* The flow's replies must leave from where it came in: an IPv6 VIP
	 * flow is recorded in agent_flows6, an IPv6 EIP flow of a guest that
	 * also serves an IPv6 VIP takes over the entry of an earlier VIP flow
	 * on its 5-tuple (lib/agentflow.h's rules, flow_note_in); an IPv6
	 * EIP whose guest serves no IPv6 VIP records nothing, and its
	 * delivery (note a constant) has no VIP check left. */
	if (r->note == NOTE6_NONE)
		return from_edge6_deliver(ctx, r, in, fib, NOTE6_NONE);
	if (flow_ported(&in->p)) {
		if (r->note == NOTE6_EIP && r->rc == BPF_FIB_LKUP_RET_SUCCESS)
			fv->ifindex = fib->ifindex;
		if (flow6_note_in(r, in, o->saddr))
			stat_add(STAT_FLOW_NEW, (long)ctx->data_end - (long)ctx->data);
	}

	return from_edge6_deliver(ctx, r, in, fib, r->note);
drop:
	return V6_VERDICT(XDP_DROP, reason);
}

/* The quote of an ICMPv6 error about an IPv6 VIP flow, or an IPv6 EIP's
 * flow (eip6_quoted: the EIP in the VIP's place, r->bport 0; its room says
 * where the quote is, r->qoff, the guest's address and the public one,
 * the port): out 0, one agent_from_edge6 delivered (V6_QUOTE), in the
 * stripped frame (the inner Ethernet header at 0): the quoted source goes
 * from the VIP (r->p6.daddr) to the guest's address (r->k.addr), the
 * quoted source port to the backend port r->bport (0: kept); out 1, one
 * the guest sends (agent_guest6, the frame as it came): the quoted
 * destination from the guest's address (r->p6.saddr) to the VIP
 * (r->k.addr), the quoted destination port to the VIP port r->bport (0:
 * kept). The ICMPv6 checksum (which covers the quote) follows; the quoted
 * upper-layer checksum is left alone, as IPv4's nat_icmp_quote leaves it
 * (quotes are usually truncated; hosts match an error by addresses and
 * ports). A global function of its own: agent_from_edge6's frame has no
 * bytes left (agent_pull_failed calls it beside it). Returns 0 or the
 * drop reason. */
__noinline int agent_quote6(struct xdp_md *ctx, __u32 out)
{
	if (!ctx)
		return STAT_DROP_INNER_BAD;
	__u32 zero = 0;
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!r)
		return STAT_DROP_INNER_BAD;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 shift = out ? 0 : r->p6.p.l3_off - ETH_HLEN_;
	__u32 l4 = r->p6.p.l4_off - shift, qoff = r->qoff - shift;
	if (r->p6.p.l3_off < ETH_HLEN_ || l4 > IPV6_L4_OFF_MAX || qoff + 44 > IPV6_L4_OFF_MAX)
		return STAT_DROP_INNER_BAD;
	__sum16 *c = data + OFF(l4 + 2);
	struct ipv6hdr *q = data + OFF(qoff);
	__be16 *qp = data + OFF(qoff + 40);
	if ((void *)(c + 1) > data_end || (void *)(q + 1) > data_end || (void *)(qp + 2) > data_end)
		return STAT_DROP_INNER_BAD;
	__be16 bport = r->bport;
	__u16 check;
	if (out) {
		check = csum_replace16(*c, r->p6.saddr.a, r->k.addr.a);
		__builtin_memcpy(&q->daddr, r->k.addr.a, 16);
		if (bport && qp[1] != bport) {
			check = csum_replace2(check, qp[1], bport);
			qp[1] = bport;
		}
	} else {
		check = csum_replace16(*c, r->p6.daddr.a, r->k.addr.a);
		__builtin_memcpy(&q->saddr, r->k.addr.a, 16);
		if (bport && qp[0] != bport) {
			check = csum_replace2(check, qp[0], bport);
			qp[0] = bport;
		}
	}
	*c = check;
	return 0;
}

/* Destinations a guest's IPv6 never leaves for (drop_bad_dst; the parser
 * already dropped ::, ::1, mapped and scope 0/1 multicast as martians): ::,
 * ::1, multicast (ff00::/8), link-local (fe80::/10: the guest's link
 * only), IPv4-mapped (::ffff:0:0/96). */
static __always_inline int guest6_bad_dst(const struct ip_addr *a)
{
	__u32 a0 = bpf_ntohl(a->a[0]);
	if ((a0 >> 24) == 0xff || (a0 & 0xffc00000) == 0xfe800000)
		return 1;
	if (a0 | a->a[1])
		return 0;
	__u32 a2 = bpf_ntohl(a->a[2]), a3 = bpf_ntohl(a->a[3]);
	return a2 == 0xffff || (!a2 && a3 <= 1);
}

/* ICMPv6 neighbour discovery (RFC 4861): router solicitation and
 * advertisement, neighbour solicitation and advertisement, hop limit
 * 255 (a node discards anything else). */
static __always_inline int ipv6_ndp(void *data, void *data_end, const struct pkt *p)
{
	if (p->proto != IPPROTO_ICMPV6_ || !p->l4_ok || p->frag || p->ttl != 255)
		return 0;
	struct icmphdr_ *ih = data + OFF(p->l4_off);
	if ((void *)(ih + 1) > data_end)
		return 0;
	/* Router solicitation, neighbour solicitation and advertisement; not
	 * a router advertisement (134): a guest is never the host's router,
	 * and a host that accepts RAs would take a default route, addresses
	 * and a DNS server from its guest (RA guard, RFC 6105). */
	return ih->type == 133 || ih->type == 135 || ih->type == 136;
}

/* agent_guest6 once the guest's IPv6 EIP entry g (NULL: none) is known:
 * the rest of what agent_guest6's comment says. Inlined twice: plain (a
 * constant 1) for a guest with an IPv6 EIP that serves no IPv6 VIP, which
 * has no flow to look up, else 0. */
static __always_inline int guest6_send(struct xdp_md *ctx, struct agent_room6 *r, struct agent_guest *g, __u64 len,
				       const int plain)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct pkt6 *p6 = &r->p6;
	struct eip_key *k = &r->k;
	/* A reply of a flow through an IPv6 VIP (or an IPv6 EIP flow that
	 * took a VIP flow's entry over): by its own 5-tuple, for a guest
	 * without an IPv6 EIP or one that serves an IPv6 VIP (AGENT_F_SVC). A
	 * SYN without ACK opens a connection of the guest's own. */
	struct agent_flow6 *f = NULL;
	struct agent_flow6_key *fk = &r->fk;
	if (!plain)
		r->quoted = 0;
	if (!plain && (!g || (g->flags & AGENT_F_SVC)) && flow_ported(&p6->p) &&
	    !(p6->p.proto == IPPROTO_TCP_ && (p6->p.tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_)) {
		fk->guest = p6->saddr;
		fk->remote = p6->daddr;
		fk->gport = pkt_sport(&p6->p);
		fk->rport = pkt_dport(&p6->p);
		fk->proto = p6->p.proto;
		fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
		f = bpf_map_lookup_elem(&agent_flows6, fk);
	} else if (!plain && (!g || (g->flags & AGENT_F_SVC))) {
		/* An ICMPv6 error by the flow it quotes: a TCP or UDP packet
		 * from the error's destination to the guest (its source). */
		r->qoff = icmp6_quote_off(data, data_end, p6);
		struct ipv6hdr *q = data + OFF(r->qoff);
		__be16 *qp = data + OFF(r->qoff + 40);
		if (r->qoff && (void *)(q + 1) <= data_end && (void *)(qp + 2) <= data_end &&
		    (q->nexthdr == IPPROTO_TCP_ || q->nexthdr == IPPROTO_UDP_) &&
		    addr6_eq(q->daddr.in6_u.u6_addr32, p6->saddr.a) && addr6_eq(q->saddr.in6_u.u6_addr32, p6->daddr.a)) {
			fk->guest = p6->saddr;
			fk->remote = p6->daddr;
			fk->gport = qp[1];
			fk->rport = qp[0];
			fk->proto = q->nexthdr;
			fk->pad[0] = fk->pad[1] = fk->pad[2] = 0;
			f = bpf_map_lookup_elem(&agent_flows6, fk);
			r->quoted = 1;
		}
	}
	if (!g && !f)
		return count_drop(ctx, STAT_DROP_LOCAL, len);
	/* A guest sends from its own interface: the one its IPv6 EIP's
	 * entry names, else the one its flow's does (a service's, written
	 * by the agent daemon). */
	if ((g ? g->ifindex : f->ifindex) != ctx->ingress_ifindex)
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	if (guest6_bad_dst(&p6->daddr))
		return count_drop(ctx, STAT_DROP_BAD_DST, len);
	if (p6->p.ttl == 0)
		return count_drop(ctx, STAT_DROP_TTL, len);
	/* The public address, the flow's or the EIP, kept in the room (the
	 * key's address is read no more); a service reply's source port goes
	 * back to the VIP's port. (What is read after the FIB lookup is kept
	 * in the room too: this frame, beneath xdp_agent_guest's and above
	 * bw6_over_eip's, has no bytes to spare.) */
	__u32 gi;
	__be32 edge = 0;
	__u16 gen = 0;
	if (!plain)
		r->bport = 0;
	r->idx = 0;
	r->note = 0;
	int via_eip = 1;
	if (f) {
		__be16 gport = r->quoted ? fk->gport : pkt_sport(&p6->p);
		k->addr = f->pub;
		r->vsid = f->vsid;
		gi = f->group;
		edge = f->edge;
		gen = f->gen;
		if (f->pport != gport)
			r->bport = f->pport;
		via_eip = g && g->eip.a[0] == k->addr.a[0] && g->eip.a[1] == k->addr.a[1] &&
			  g->eip.a[2] == k->addr.a[2] && g->eip.a[3] == k->addr.a[3];
	} else {
		k->addr = g->eip;
		r->vsid = g->vsid;
		gi = g->group;
	}
	/* The EIP's counters and bandwidth limit: a packet through the EIP,
	 * not a reply through a VIP. */
	if (via_eip && g) {
		r->idx = g->stats_idx;
		r->note = GUEST6_EIP | ((g->flags & AGENT_F_BW) ? GUEST6_BW : 0);
	}

	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	__be32 ports = !plain && r->bport && !r->quoted ? ports_with_sport(p6->p.ports, r->bport) : p6->p.ports;
	r->hash = flow_hash6(k->addr.a, p6->daddr.a, ports, p6->p.proto, cfg->hash_seed);
	struct agent_group *grp = bpf_map_lookup_elem(&agent_groups, &gi);
	/* Back to the edge the flow came from while no member has left the
	 * group since, by the flow hash otherwise (as IPv4's). A health
	 * check's answer (AGENT_GROUP_PIN: no group, the lookup misses) goes
	 * back to the edge that checked, whatever (lib/agenthc.h). */
	__be32 to;
	if (!grp) {
		if (gi != AGENT_GROUP_PIN)
			return count_drop(ctx, STAT_DROP_NO_EDGE, len);
		to = edge;
	} else if (edge && gen == grp->gen) {
		to = edge;
	} else {
		__u32 n = grp->n;
		if (n == 0 || n > EDGE_SET_MAX)
			return count_drop(ctx, STAT_DROP_NO_EDGE, len);
		__u32 slot = r->hash % n;
		barrier_var(slot);
		to = grp->edges[slot & (EDGE_SET_MAX - 1)];
	}
	if (!to)
		return count_drop(ctx, STAT_DROP_NO_EDGE, len);

	struct bpf_fib_lookup *fib = (struct bpf_fib_lookup *)&r->fib;
	__be32 underlay = cfg->underlay.a[0];
	__u16 ip_len = p6->p.ip_len;
	int rc = fib4c(ctx, fib, cfg->nh_gen, underlay, to, ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0);
	/* An edge of the IPv6 underlay (its name): agent_fib6's route. */
	if (rc == FIB_RET_UL6) {
		rc = agent_fib6(ctx, fib, to, ip_len + NVGRE_OVERHEAD, r->hash);
		r->note |= GUEST6_UL6;
	}
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* Packet too big (RFC 8201), the MTU the inner packet has over
		 * the tunnel (either outer family: agent_fib6 took the IPv6
		 * outer's 20 bytes more off), from agent_config.icmp_src6;
		 * without one, or an MTU below 1280, drop_too_big. */
		__u32 mtu = fib->mtu_result > NVGRE_OVERHEAD ? fib->mtu_result - NVGRE_OVERHEAD : 0;
		rc = icmp6_error(ctx, p6, ICMP6_WHAT(ICMP_KIND_FRAG, mtu > 0xffff ? 0xffff : mtu));
		if (rc & ICMP6_SENT) {
			count_out(ctx, rc & 0xffff, len);
			return XDP_TX;
		}
		return count_drop(ctx, rc, len);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count_drop(ctx, fib_reason(rc), len);
	/* The EIP's bandwidth limit, once the packet is sure to leave. */
	if ((r->note & GUEST6_BW) && bw6_over_eip(&k->addr, ip_len))
		return count_drop(ctx, STAT_DROP_BW, len);

	rc = nat6(data, data_end, p6, 0, p6->saddr.a, k->addr.a);
	if (rc)
		return count_drop(ctx, rc, len);
	/* A packet through the IPv6 EIP (no flow): an ICMPv6 error about the
	 * EIP's flow has its quote to the guest's address translated to the
	 * EIP too (agent_quote6), one about another address leaves as it is,
	 * one with a truncated quote is drop_l4_trunc (IPv4's nat4). (nat6
	 * changed the outer header alone: the quote is as it came.) */
	if (!f && p6->p.proto == IPPROTO_ICMPV6_) {
		rc = eip6_quoted(data, data_end, r, p6, 1);
		if (rc < 0)
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
		if (rc) {
			rc = agent_quote6(ctx, 1);
			if (rc)
				return count_drop(ctx, rc, len);
			data = (void *)(long)ctx->data;
			data_end = (void *)(long)ctx->data_end;
		}
	} else if (!plain && r->quoted) {
		rc = agent_quote6(ctx, 1);
		if (rc)
			return count_drop(ctx, rc, len);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
	} else if (!plain && r->bport) {
		rc = nat6_port(data, data_end, p6, 0, r->bport);
		if (rc)
			return count_drop(ctx, rc, len);
	}
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	mac_copy(r->peer, eth->h_source);
	if (r->note & GUEST6_UL6) {
		rc = agent_push6(ctx, fib, r->ul6key.a[0], AGENT_PUSH6_PKT(p6->p.l3_off, ip_len, p6->p.tos, bpf_htons(ETH_P_IPV6_)),
				 AGENT_PUSH6_KEY((r->vsid << 8) | (r->hash & 0xff), r->hash));
		if (rc)
			return count_drop(ctx, rc, len);
	} else {
		if (nvgre_to(ctx, p6->p.l3_off, ip_len, p6->p.tos, fib, underlay, to, (r->vsid << 8) | (r->hash & 0xff),
			     cfg->gw_mac, r->peer))
			return count_drop(ctx, STAT_DROP_HEADROOM, len);
		/* nvgre_push writes an IPv4 inner ethertype. */
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		__be16 *ieth_proto = data + NVGRE_STACK_LEN - 2;
		if ((void *)(ieth_proto + 1) > data_end)
			return count_drop(ctx, STAT_DROP_HEADROOM, len);
		*ieth_proto = bpf_htons(ETH_P_IPV6_);
	}

	struct eip_stats *es = (plain || (r->note & GUEST6_EIP)) ? bpf_map_lookup_elem(&eip_stats, &r->idx) : NULL;
	if (es) {
		es->tx_packets++;
		es->tx_bytes += ip_len;
	}
	count_out(ctx, STAT_ENCAP_TX, len);
	return xmit(ctx, fib->ifindex);
}

/* entry.h's declaration says what it does (called by parse_frame for a
 * guest's valid IPv6 packet, which ipv6_frame parsed into the per-CPU
 * room). Neighbour discovery (router solicitations, neighbour
 * solicitations and advertisements; a guest's router advertisement is
 * dropped, drop_local) goes to the host's kernel (pass_ipv6) whatever its
 * source, so that a guest resolves its gateway (the kernel
 * judges it; a neighbour entry belongs to the guest's own interface). The
 * rest must be the reply of a flow through an IPv6 VIP (agent_flows6, by
 * its 5-tuple: for a guest without an IPv6 EIP, or one whose entry says
 * AGENT_F_SVC) or come from a guest with an IPv6 EIP (agent_guests,
 * family 6; neither: drop_local, as every guest's IPv6 was), on its own
 * interface (the EIP's entry names it, else the flow's: drop_spoof), to a
 * destination a router forwards to (drop_bad_dst) with
 * a hop limit above 0 (drop_ttl; left as it is otherwise: the agent is a
 * host, the edge the hop that decrements, as IPv4's TTL). A flow's reply
 * is translated back to its VIP and port and goes in NVGRE to the edge
 * the flow came from while no member left the VIP's edge group since
 * (else by the flow hash); the rest's source is translated to the EIP and
 * it goes in NVGRE to a member of the EIP's edge group by the IPv6 flow
 * hash (lib/hash.h), the outer IPv4 from the agent's underlay address.
 * The EIP's bandwidth limit (AGENT_F_BW: eip_bw6, bw6_over_eip) drops
 * what goes through the EIP over it (drop_bw). A packet too big for the
 * tunnel is answered with an ICMPv6 packet too big (icmp6_error,
 * lib/icmp6.h: from agent_config.icmp_src6, --icmp-source6 or the
 * host's IPv6 underlay address, within ICMP_KIND_FRAG's budget; none:
 * drop_too_big). Not yet for
 * IPv6: --local-allow. An ICMPv6 error the guest sends about a VIP flow
 * goes by the flow it quotes (a TCP or UDP packet from the error's
 * destination to the guest), its quote translated back to the VIP and VIP port
 * (agent_quote6); one through the IPv6 EIP has a quote to the guest's
 * address translated to the EIP (eip6_quoted, agent_quote6; a truncated
 * quote drop_l4_trunc). */
__noinline int agent_guest6(struct xdp_md *ctx)
{
	if (!ctx)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	__u32 zero = 0;
	struct agent_room6 *r = bpf_map_lookup_elem(&agent_scratch6, &zero);
	if (!r)
		return count_drop(ctx, STAT_DROP_LOCAL, len);
	/* ipv6_frame parsed it into the room and found it valid. */
	struct pkt6 *p6 = &r->p6;

	if (ipv6_ndp(data, data_end, &p6->p))
		return count_pass(ctx, STAT_PASS_IPV6, len);
	struct eip_key *k = &r->k;
	k->addr = p6->saddr;
	k->family = AF_INET6_;
	k->pad[0] = k->pad[1] = k->pad[2] = 0;
	struct agent_guest *g = bpf_map_lookup_elem(&agent_guests, k);
	if (g && g->family != AF_INET6_)
		g = NULL;
	/* An IPv6 EIP whose guest serves no IPv6 VIP (the common case) goes
	 * through a copy of the rest with plain a constant: no flow lookup,
	 * no VIP check left on its path. */
	if (g && !(g->flags & AGENT_F_SVC))
		return guest6_send(ctx, r, g, len, 1);
	return guest6_send(ctx, r, g, len, 0);
}

/* agent_from_edge's verdict on NVGRE nvgre_pull refused (reason rc,
 * the frame len bytes): an inner IPv6 frame is agent_from_edge6's, the
 * rest is dropped under rc. A function of its own, called where
 * agent_from_edge counted the drop: with the IPv6 branch inline, clang
 * laid agent_from_edge's IPv4 code out otherwise (11 instructions fewer on
 * its decap path, `bench dataplane`), and the IPv4 paths' instructions
 * stay as they were. */
__noinline int agent_pull_failed(struct xdp_md *ctx, __u32 rc, __u64 len, const struct pkt *o)
{
	if (!ctx || !o)
		return XDP_ABORTED;
	if (rc != STAT_DROP_INNER_BAD)
		return count_drop(ctx, rc, len);
	rc = agent_from_edge6(ctx, o);
	if (rc & V6_QUOTE) {
		rc &= ~V6_QUOTE;
		__u32 bad = agent_quote6(ctx, 0);
		if (bad)
			return count_drop(ctx, bad, len);
	}
	__u32 stat = rc >> 8, act = rc & 0xff;
	if (act == XDP_PASS)
		return count_pass(ctx, stat, len);
	if (act != XDP_TX && act != XDP_REDIRECT)
		return count_drop(ctx, stat, len);
	count_out(ctx, stat, len);
	return act;
}

/* A global (separately verified) function: inlined, its service and NAT
 * branches multiplied the verifier's states past its limit. */
__noinline int agent_from_edge(struct xdp_md *ctx, struct pkt *o)
{
	__u32 zero = 0;
	if (!ctx || !o)
		return XDP_ABORTED;
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	__u64 len = (long)ctx->data_end - (long)ctx->data;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct bpf_fib_lookup fib;
	struct eip_key k;
	struct pkt in;
	__u32 vsid;
	int rc;

	eip_key4(&k, o->saddr);
	if (!bpf_map_lookup_elem(&agent_edge_set, &k))
		return count_drop(ctx, STAT_DROP_SPOOF, len);
	rc = nvgre_pull(data, data_end, o, &in, &vsid);
	if (rc)
		return agent_pull_failed(ctx, rc, len, o);
	/* The edge, a router hop, never sends TTL 0 (it drops TTL <= 1):
	 * such a packet is forged or broken, and must not be delivered
	 * (RFC 1122 3.2.1.7). Found by fuzzing (issue 9). */
	if (in.ttl == 0)
		return count_drop(ctx, STAT_DROP_TTL, len);

	eip_key4(&k, in.daddr);
	struct agent_eip *e = bpf_map_lookup_elem(&agent_eips, &k);
	__be32 priv;
	__u32 idx = 0;
	__be16 bport = 0, vport = 0;
	__u64 group = 0;
	int svc = 0, icmp = 0, also_svc = 0;
	if (e) {
		if (e->vsid != vsid)
			return count_drop(ctx, STAT_DROP_UNKNOWN, len);
		priv = e->private_addr.a[0];
		idx = e->stats_idx;
		also_svc = e->flags & AGENT_F_SVC;
		group = e->group;
	} else {
		struct svc_key sk;
		struct svc_entry *se = svc_lookup(data, data_end, &in, &sk, &vport, &icmp);
		if (se && se->vsid == vsid) {
			priv = sk.guest;
			bport = se->bport;
			group = se->group;
		} else if (hc_guest_ok(&in, vsid)) {
			/* An edge's health check, to a checked port of the
			 * guest's own address: delivered as it is, its flow recorded so the answer
			 * goes back to that edge untranslated, whatever its group. */
			priv = in.daddr;
			group = AGENT_GROUP_PIN;
		} else {
			return count_drop(ctx, STAT_DROP_UNKNOWN, len);
		}
		svc = 1;
	}

	rc = fib4c(ctx, &fib, cfg->nh_gen, in.saddr, priv, in.ip_len, in.proto, in.tos);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return count_drop(ctx, STAT_DROP_TOO_BIG, len);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return count_drop(ctx, STAT_DROP_FIB, len);

	/* The flow's replies must leave from where it came in: a VIP flow is
	 * recorded, an EIP flow of a guest that also serves a VIP takes over
	 * the entry of an earlier VIP flow on its 5-tuple. */
	if (svc || also_svc) {
		__u64 ifx_ok = (__u64)fib.ifindex << 32 | group << 16 | (rc == BPF_FIB_LKUP_RET_SUCCESS) << 1 | svc;
		if (flow_note_in(&in, priv, o->saddr, (__u64)vsid << 32 | bport, ifx_ok))
			stat_add(STAT_FLOW_NEW, len);
	}

	if (nat4(data, data_end, &in, 1, priv))
		return count_drop(ctx, STAT_DROP_INNER_BAD, len);
	if (bport) {
		int bad = icmp ? nat_icmp_quote_port(data + OFF(in.l4_off), data_end, 0, vport, bport)
			       : nat4_port(data, data_end, &in, 1, bport);
		if (bad)
			return count_drop(ctx, STAT_DROP_INNER_BAD, len);
	}

	struct ethhdr *oeth = data;
	if ((void *)(oeth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	__u8 ours[ETH_ALEN_], peer[ETH_ALEN_];
	__builtin_memcpy(ours, oeth->h_dest, ETH_ALEN_);
	__builtin_memcpy(peer, oeth->h_source, ETH_ALEN_);
	__u16 ip_len = in.ip_len;
	if (nvgre_strip(ctx, &in))
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_HEADROOM, len);

	struct eip_stats *es = svc ? NULL : bpf_map_lookup_elem(&eip_stats, &idx);
	if (es) {
		es->rx_packets++;
		es->rx_bytes += ip_len;
	}
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		__builtin_memcpy(eth->h_dest, ours, ETH_ALEN_);
		__builtin_memcpy(eth->h_source, peer, ETH_ALEN_);
		count_pass(ctx, STAT_DECAP_PASS, len);
		return XDP_PASS;
	}
	__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN_);
	__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN_);
	count_out(ctx, STAT_DECAP_TX, len);
	return xmit(ctx, fib.ifindex);
}

static __always_inline int agent_underlay_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct pkt p;
	__u32 zero = 0;

	int rc = parse_frame(ctx, data, data_end, &p, len, FRAME_F_UL6);
	if (rc != FRAME_IPV4) {
		/* NVGRE over IPv6 from an edge: p its outer headers, the
		 * edge's name the source (agent_ul6_in). */
		if (rc == FRAME_NVGRE6_IN)
			return agent_from_edge(ctx, &p);
		return rc;
	}
	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	if (nvgre_for_us(&p, &cfg->underlay.a[0]))
		return agent_from_edge(ctx, &p);
	return count_pass(ctx, STAT_PASS_NOT_OURS, len);
}

/* Whether a rule of the local prefix allows the packet: its protocol
 * (or any) and, for TCP and UDP, its destination port in the range (a
 * fragment's ports are zero: only a rule for every port takes it). */
static __always_inline int local_allowed(const struct local_allow *la, const struct pkt *p)
{
	__u16 port = 0;
	if (p->proto == IPPROTO_TCP_ || p->proto == IPPROTO_UDP_)
		port = bpf_ntohs(pkt_dport(p));
#pragma unroll
	for (int i = 0; i < LOCAL_RULES_MAX; i++) {
		if ((__u32)i >= la->n)
			break;
		const struct local_rule *r = &la->r[i];
		if (r->proto && r->proto != p->proto)
			continue;
		if (port >= r->lo && port <= r->hi)
			return 1;
	}
	return 0;
}

static __always_inline int agent_guest_main(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 len = data_end - data;
	struct bpf_fib_lookup fib;
	struct eip_key k;
	struct pkt p;
	__u32 zero = 0;
	int rc;

	/* No IPv6 from a guest: there are no IPv6 EIPs, and the host's
	 * kernel would answer it (link-local, on every listener bound to
	 * ::): a path to the host --local-allow does not open. */
	rc = parse_frame(ctx, data, data_end, &p, len, FRAME_F_DROP_IPV6);
	if (rc != FRAME_IPV4)
		return rc;

	/* Whose packet is this: a guest with an EIP (one lookup: the pure
	 * EIP path stays as it was), then the flow it belongs to, for guests
	 * that serve a VIP or have no EIP (lib/agentflow.h). */
	eip_key4(&k, p.saddr);
	struct agent_guest *g = bpf_map_lookup_elem(&agent_guests, &k);
	struct agent_flow *f = NULL;
	struct agent_flow_key fk;
	int quoted = 0;
	if (!g || (g->flags & AGENT_F_SVC)) {
		int how = flow_reply_key(ctx, &p, &fk);
		if (how != FLOW_NONE)
			f = bpf_map_lookup_elem(&agent_flows, &fk);
		quoted = how == FLOW_QUOTED;
	}
	/* A guest sends from its own address or not at all: no forged
	 * source reaches the host's kernel or the underlay. The EIP's entry
	 * and the flow's name the guest's interface; an EIP on another
	 * interface is spoofing, a flow whose interface differs (the route to
	 * the guest moved) and anything else must be an address agent_ifaddrs
	 * lists for the interface (one more lookup, off the fast path). */
	__u32 ifx = f ? f->ifindex : g ? g->ifindex : 0;
	/* (barrier: clang would keep &ctx->ingress_ifindex for fib4c's
	 * read, a modified ctx pointer the verifier refuses.) */
	__u32 ingress = ctx->ingress_ifindex;
	barrier_var(ctx);
	if (ifx != ingress) {
		if (ifx && !f)
			return count_drop(ctx, STAT_DROP_SPOOF, len);
		struct if_addr ia = {.ifindex = ingress, .addr = p.saddr};
		if (!bpf_map_lookup_elem(&agent_ifaddrs, &ia))
			return count_drop(ctx, STAT_DROP_SPOOF, len);
	}
	if (!f) {
		/* Not a reply of a recorded flow: a local destination
		 * (--local-allow) goes to the host's kernel if one of its rules
		 * allows the packet and nowhere otherwise; the rest leaves
		 * through the guest's EIP or not at all (a flow entry's remote
		 * came from the edge: never local). */
		struct lpm4_key lk = {.prefixlen = 32, .addr = p.daddr};
		struct local_allow *la = bpf_map_lookup_elem(&agent_local, &lk);
		if (la) {
			if (local_allowed(la, &p))
				return count_pass(ctx, STAT_PASS_LOCAL, len);
			return count_drop(ctx, STAT_DROP_LOCAL, len);
		}
		if (!g)
			return count_drop(ctx, STAT_DROP_NO_EIP, len);
	}

	/* Nothing leaves for a destination no router forwards to (multicast,
	 * broadcast, 0/8, 127/8: the edge would drop it after the tunnel,
	 * the EIP's counters having billed it) or with TTL 0 (RFC 1122
	 * 3.2.1.7: never sent). Found by fuzzing (issue 9). */
	if (ipv4_martian(p.daddr))
		return count_drop(ctx, STAT_DROP_BAD_DST, len);
	if (p.ttl == 0)
		return count_drop(ctx, STAT_DROP_TTL, len);

	struct agent_config *cfg = bpf_map_lookup_elem(&agent_cfg, &zero);
	if (!cfg)
		return XDP_PASS;
	__be32 eip = f ? f->pub : g ? g->eip.a[0] : 0;
	/* The guest's port (an ICMP error's: of the flow it quotes). Not
	 * a ?: here: clang 14 then lays the blocks out for 2 more
	 * instructions a packet. */
	__be16 gport = pkt_sport(&p);
	if (quoted)
		gport = fk.gport;
	__be16 vport = f && f->pport != gport ? f->pport : 0;
	__u32 vsid = f ? f->vsid : g ? g->vsid : 0;
	__u32 idx = g ? g->stats_idx : 0;
	int count_eip = g && eip == g->eip.a[0];
	int bw = count_eip && (g->flags & AGENT_F_BW);
	__be32 ports = vport && !quoted ? ports_with_sport(p.ports, vport) : p.ports;
	__u32 hash = flow_hash4(eip, p.daddr, ports, p.proto, cfg->hash_seed);
	/* To a live member of the edge set that serves the public address
	 * (its group): back to the edge the flow came from (its connection
	 * table knows the flow) while no member has left the group since it
	 * was learnt, by the flow hash otherwise. A health check's answer goes
	 * back to the edge that checked, whatever. */
	__u32 gi = f ? f->group : g ? g->group : 0;
	__be32 to = 0;
	if (gi == AGENT_GROUP_PIN) {
		to = f ? f->edge : 0;
	} else {
		struct agent_group *grp = bpf_map_lookup_elem(&agent_groups, &gi);
		if (!grp)
			return count_drop(ctx, STAT_DROP_NO_EDGE, len);
		if (f && f->edge && f->gen == grp->gen) {
			to = f->edge;
		} else {
			__u32 n = grp->n;
			if (n == 0 || n > EDGE_SET_MAX)
				return count_drop(ctx, STAT_DROP_NO_EDGE, len);
			__u32 slot = hash % n;
			/* (clang knows slot < n <= EDGE_SET_MAX and would drop a
			 * bound check; the verifier does not know: mask it.) */
			barrier_var(slot);
			to = grp->edges[slot & (EDGE_SET_MAX - 1)];
		}
	}
	if (!to)
		return count_drop(ctx, STAT_DROP_NO_EDGE, len);

	rc = fib4c(ctx, &fib, cfg->nh_gen, cfg->underlay.a[0], to, p.ip_len + NVGRE_OVERHEAD, IPPROTO_GRE_, 0);
	/* An edge of the IPv6 underlay (its name: fib4_miss answers for it):
	 * its route over IPv6, the MTU as the IPv4 tunnel's would be. */
	if (rc == FIB_RET_UL6)
		rc = agent_fib6(ctx, &fib, to, p.ip_len + NVGRE_OVERHEAD, hash);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* (No ICMP source: a host of the IPv6 underlay has no IPv4
		 * address to send one from.) */
		if (!p.df || !cfg->icmp_src.a[0])
			return count_drop(ctx, STAT_DROP_TOO_BIG, len);
		__u16 mtu = fib.mtu_result > NVGRE_OVERHEAD + 68 ? fib.mtu_result - NVGRE_OVERHEAD : 68;
		rc = icmp4_error(ctx, &p, ICMP_WHAT(ICMP_KIND_FRAG, ICMP_DEST_UNREACH_, ICMP_FRAG_NEEDED_, mtu),
				 cfg->icmp_src.a[0]);
		if (rc == ICMP_SENT) {
			count_out(ctx, STAT_ICMP_FRAG_TX, len);
			return XDP_TX;
		}
		return count_drop(ctx, rc == ICMP_LIMITED ? STAT_DROP_ICMP_LIMIT : STAT_DROP_TOO_BIG, len);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return count_drop(ctx, fib_reason(rc), len);
	/* The EIP's bandwidth limit, once the packet is sure to leave. */
	if (bw && bw_over(idx, eip, p.ip_len))
		return count_drop(ctx, STAT_DROP_BW, len);

	if (nat4(data, data_end, &p, 0, eip))
		return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
	if (vport) {
		int bad = quoted ? nat_icmp_quote_port(data + OFF(p.l4_off), data_end, 1, gport, vport)
				 : nat4_port(data, data_end, &p, 0, vport);
		if (bad)
			return count_drop(ctx, STAT_DROP_L4_TRUNC, len);
	}

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return count_drop(ctx, STAT_DROP_ETH_TRUNC, len);
	/* The guest's MAC is the frame's: kept aside, the push moves it. */
	__u8 guest_mac[ETH_ALEN_];
	__builtin_memcpy(guest_mac, eth->h_source, ETH_ALEN_);
	__u16 ip_len = p.ip_len;
	if (UL6_HOST(to)) {
		rc = agent_push6(ctx, &fib, to, AGENT_PUSH6_PKT(p.l3_off, ip_len, p.tos, bpf_htons(ETH_P_IP_)),
				 AGENT_PUSH6_KEY((vsid << 8) | (hash & 0xff), hash));
		if (rc)
			return count_drop(ctx, rc, len);
	} else if (nvgre_to(ctx, p.l3_off, ip_len, p.tos, &fib, cfg->underlay.a[0], to, (vsid << 8) | (hash & 0xff),
			    cfg->gw_mac, guest_mac)) {
		return count_drop(ctx, STAT_DROP_HEADROOM, len);
	}

	struct eip_stats *es = count_eip ? bpf_map_lookup_elem(&eip_stats, &idx) : NULL;
	if (es) {
		es->tx_packets++;
		es->tx_bytes += ip_len;
	}
	count_out(ctx, STAT_ENCAP_TX, len);
	return xmit(ctx, fib.ifindex);
}

SEC("xdp")
int xdp_agent_underlay(struct xdp_md *ctx)
{
	mon_event(ctx, 0, MON_K_IN);
	return agent_underlay_main(ctx);
}

SEC("xdp")
int xdp_agent_guest(struct xdp_md *ctx)
{
	mon_event(ctx, 0, MON_K_IN);
	return agent_guest_main(ctx);
}
