/* agentflow.h: the host agent's flow table (agent_flows, an LRU hash).
 *
 * A guest can be reached through its EIP and, as an encap-mode service
 * backend, through one or more VIPs, on the same port. Its replies carry
 * only its own address, so the agent remembers per flow which public
 * address and port the flow came in through (issue 7, section 2):
 *
 *   - xdp_agent_underlay writes an entry when it decapsulates the first
 *     packet of a TCP or UDP flow to a VIP (key: the reply's 5-tuple as the
 *     guest sends it; value: the VIP and port, the edge that sent it, the
 *     guest's VSID and interface). Only a first packet writes one: a TCP
 *     SYN without ACK, a UDP packet with no entry yet. A TCP packet with
 *     no entry that is not a SYN creates nothing (a bare ACK or a spoofed
 *     segment from the Internet cannot fill the table; the replies of a
 *     flow without an entry leave through the guest's EIP, as an evicted
 *     flow's). An entry that names another public address is rewritten
 *     only by a TCP SYN (a new connection on the same 5-tuple): a spoofed
 *     packet to the guest's EIP on a VIP flow's tuple, or to a VIP on an
 *     EIP flow's, does not flip it; a UDP entry is never rewritten to
 *     another address (it ends when the LRU evicts it: UDP has no SYN to
 *     tell a new flow from a forged one). A packet through the entry's
 *     own address and port may refresh its edge, interface, edge group and
 *     the group's generation (where its replies go, never what they carry).
 *     An EIP packet to a guest that is also a service backend creates no
 *     entry (a guest's EIP is the fallback of every reply anyway); its SYN
 *     rewrites an entry an earlier VIP flow left on its 5-tuple.
 *   - xdp_agent_guest translates a reply by its own entry first, and an
 *     ICMP error the guest sends by the entry of the flow it quotes.
 *
 * Flows through an IPv6 VIP follow the same rules in a table of their own,
 * agent_flows6 (16-byte addresses; agent.c, flow6_note_in and
 * agent_guest6), so agent_flows' IPv4 entries stay as small.
 *
 * The hot path writes nothing when nothing changed: an entry is compared
 * before it is written (Katran and Cilium update their tables only when
 * needed), and the LRU's own bookkeeping on lookup keeps live flows from
 * eviction, so there is no per-packet timestamp to write. */
#ifndef AZG_AGENTFLOW_H
#define AZG_AGENTFLOW_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"
#include "maps.h"
#include "parse.h"
#include "nat.h"

/* TCP or UDP with its ports: unfragmented (parse_ipv4 leaves ports zero in
 * every fragment, the first one included). */
static __always_inline int flow_ported(const struct pkt *p)
{
	return p->l4_ok && !p->frag && (p->proto == IPPROTO_TCP_ || p->proto == IPPROTO_UDP_);
}

static __always_inline int flow_same(const struct agent_flow *a, const struct agent_flow *b)
{
	return a->pub == b->pub && a->pport == b->pport && a->edge == b->edge && a->vsid == b->vsid &&
	       a->ifindex == b->ifindex && a->gen == b->gen && a->group == b->group;
}

/* Records, for the decapsulated packet in (to the guest priv, from the
 * edge at underlay address edge), where its flow came in: the first packet
 * of a flow to a VIP (learn: a TCP SYN without ACK, any UDP packet) writes
 * its entry; a packet through the entry's own public address and port
 * refreshes where the replies go when that changed; only a TCP SYN moves an
 * entry to another public address (a flow to the guest's EIP, !learn,
 * creates none: a reply without one leaves through the EIP). See the head
 * of this file. vsid_bport: the guest's VSID << 32 | the backend port the
 * packet is translated to (0: kept); ifx: the guest's interface << 32 |
 * the edge group of the public address (agent_groups index or
 * AGENT_GROUP_PIN) << 16 | 2 when the FIB resolved it | learn. The entry
 * keeps the group's generation: its replies go back to edge while no
 * member has left the group since. Returns 1 when it wrote. A global
 * (separately verified) function, as is flow_reply_key: inlined, their
 * branches multiplied the callers' verifier states (and five arguments is
 * all a BPF call takes, hence the packing). */
__noinline int flow_note_in(const struct pkt *in, __be32 priv, __be32 edge, __u64 vsid_bport, __u64 ifx)
{
	if (!in || !flow_ported(in))
		return 0;
	__u32 gi = (ifx >> 16) & 0xffff;
	__u16 gen = 0;
	if (gi != AGENT_GROUP_PIN) {
		struct agent_group *grp = bpf_map_lookup_elem(&agent_groups, &gi);
		if (grp)
			gen = grp->gen;
	}
	int tcp = in->proto == IPPROTO_TCP_;
	int syn = tcp && (in->tcp_flags & 0x12) == 0x02;
	__be16 dport = pkt_dport(in);
	__be16 bport = (__be16)(vsid_bport & 0xffff);
	struct agent_flow_key k = {
		.guest = priv,
		.remote = in->saddr,
		.gport = bport ? bport : dport,
		.rport = pkt_sport(in),
		.proto = in->proto,
	};
	struct agent_flow v = {
		.pub = in->daddr,
		.edge = edge,
		.pport = dport,
		.gen = gen,
		.vsid = vsid_bport >> 32,
		.ifindex = (ifx & 2) ? ifx >> 32 : 0,
		.group = gi,
	};
	struct agent_flow *cur = bpf_map_lookup_elem(&agent_flows, &k);
	if (cur) {
		if (flow_same(cur, &v))
			return 0;
		/* Another public address: only a new connection takes the
		 * 5-tuple over (a forged packet must not flip the replies). */
		if ((cur->pub != v.pub || cur->pport != v.pport) && !syn)
			return 0;
		*cur = v;
		return 1;
	}
	if (!(ifx & 1) || (tcp && !syn))
		return 0;
	return bpf_map_update_elem(&agent_flows, &k, &v, BPF_ANY) == 0;
}

#define FLOW_NONE 0   /* no flow entry can hold this packet */
#define FLOW_PORTED 1 /* TCP or UDP: looked up by its own 5-tuple */
#define FLOW_QUOTED 2 /* ICMP error: looked up by the flow it quotes */

/* The key of the flow a guest's packet p belongs to: a TCP or UDP packet
 * by its own 5-tuple (a SYN without ACK opens a connection of the guest's
 * own and never belongs to an entry); an ICMP error by the flow it quotes,
 * which must be a packet from the error's destination to its source (the
 * guest). Returns FLOW_*. */
__noinline int flow_reply_key(struct xdp_md *ctx, const struct pkt *p, struct agent_flow_key *k)
{
	if (!ctx || !p || !k)
		return FLOW_NONE;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__builtin_memset(k, 0, sizeof(*k));
	if (flow_ported(p)) {
		if (p->proto == IPPROTO_TCP_ && (p->tcp_flags & (TCP_SYN_ | TCP_ACK_)) == TCP_SYN_)
			return FLOW_NONE;
		k->guest = p->saddr;
		k->remote = p->daddr;
		k->gport = pkt_sport(p);
		k->rport = pkt_dport(p);
		k->proto = p->proto;
		return FLOW_PORTED;
	}
	if (p->proto != IPPROTO_ICMP_ || !p->l4_ok || p->frag)
		return FLOW_NONE;
	struct icmphdr_ *ih = data + OFF(p->l4_off);
	if ((void *)(ih + 1) > data_end || !icmp_is_error(ih->type))
		return FLOW_NONE;
	__be32 qs, qd;
	__be16 qsp, qdp;
	__u8 qp;
	if (icmp_quoted_flow(ih, data_end, p->ip_len - (p->l4_off - p->l3_off), &qs, &qd, &qsp, &qdp, &qp))
		return FLOW_NONE;
	if (qd != p->saddr || qs != p->daddr || (qp != IPPROTO_TCP_ && qp != IPPROTO_UDP_))
		return FLOW_NONE;
	k->guest = qd;
	k->remote = qs;
	k->gport = qdp;
	k->rport = qsp;
	k->proto = qp;
	return FLOW_QUOTED;
}

#endif
