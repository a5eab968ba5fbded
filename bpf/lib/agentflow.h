/* agentflow.h: the host agent's flow table (agent_flows, an LRU hash).
 *
 * A guest can be reached through its EIP and, as an encap-mode service
 * backend, through one or more VIPs, on the same port. Its replies carry
 * only its own address, so the agent remembers per flow which public
 * address and port the flow came in through (issue 7, section 2):
 *
 *   - xdp_agent_underlay writes an entry when it decapsulates a TCP or UDP
 *     packet to a VIP (key: the reply's 5-tuple as the guest sends it;
 *     value: the VIP and port, the edge that sent it, the guest's VSID and
 *     interface). An EIP packet to a guest that is also a service backend
 *     rewrites an existing entry that names another address; it creates
 *     none, because a guest's EIP is the fallback of every reply anyway.
 *   - xdp_agent_guest translates a reply by its own entry first, and an
 *     ICMP error the guest sends by the entry of the flow it quotes.
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
#include "parse.h"
#include "nat.h"

/* Flows that came in through a VIP: reply 5-tuple -> public side. One
 * table for every guest of the host, evicted least recently used. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, AGENT_FLOW_MAX);
	__type(key, struct agent_flow_key);
	__type(value, struct agent_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_flows SEC(".maps");

/* TCP or UDP with its ports: unfragmented (parse_ipv4 leaves ports zero in
 * every fragment, the first one included). */
static __always_inline int flow_ported(const struct pkt *p)
{
	return p->l4_ok && !p->frag && (p->proto == IPPROTO_TCP_ || p->proto == IPPROTO_UDP_);
}

static __always_inline int flow_same(const struct agent_flow *a, const struct agent_flow *b)
{
	return a->pub == b->pub && a->pport == b->pport && a->edge == b->edge && a->vsid == b->vsid &&
	       a->ifindex == b->ifindex && a->edges_gen == b->edges_gen;
}

/* Records v for k (a flow to a VIP) unless the entry already says the
 * same. Returns 1 when it wrote. */
static __always_inline int flow_learn(const struct agent_flow_key *k, const struct agent_flow *v)
{
	struct agent_flow *cur = bpf_map_lookup_elem(&agent_flows, k);
	if (cur) {
		if (flow_same(cur, v))
			return 0;
		*cur = *v;
		return 1;
	}
	return bpf_map_update_elem(&agent_flows, k, v, BPF_ANY) == 0;
}

/* A flow to the guest's EIP: an entry left by an earlier flow to a VIP on
 * the same 5-tuple is rewritten to the EIP; no entry is created (a reply
 * without one leaves through the EIP). Returns 1 when it wrote. */
static __always_inline int flow_claim(const struct agent_flow_key *k, const struct agent_flow *v)
{
	struct agent_flow *cur = bpf_map_lookup_elem(&agent_flows, k);
	if (!cur || flow_same(cur, v))
		return 0;
	*cur = *v;
	return 1;
}

/* The flow entry a guest's packet p belongs to, or NULL: a TCP or UDP
 * packet by its own 5-tuple (a SYN without ACK opens a connection of the
 * guest's own and never belongs to an entry); an ICMP error by the flow it
 * quotes, which must be a packet from the error's destination to its
 * source (the guest), with *quoted set. */
static __always_inline struct agent_flow *flow_of_reply(void *data, void *data_end, const struct pkt *p,
							struct agent_flow_key *k, int *quoted)
{
	*quoted = 0;
	__builtin_memset(k, 0, sizeof(*k));
	if (flow_ported(p)) {
		if (p->proto == IPPROTO_TCP_ && (p->tcp_flags & 0x12) == 0x02)
			return NULL;
		k->guest = p->saddr;
		k->remote = p->daddr;
		k->gport = (__be16)(p->ports & 0xffff);
		k->rport = (__be16)(p->ports >> 16);
		k->proto = p->proto;
		return bpf_map_lookup_elem(&agent_flows, k);
	}
	if (p->proto != IPPROTO_ICMP_ || !p->l4_ok || p->frag)
		return NULL;
	struct icmphdr_ *ih = data + OFF(p->l4_off);
	if ((void *)(ih + 1) > data_end || !icmp_is_error(ih->type))
		return NULL;
	__be32 qs, qd;
	__be16 qsp, qdp;
	__u8 qp;
	if (icmp_quoted_flow(ih, data_end, p->ip_len - (p->l4_off - p->l3_off), &qs, &qd, &qsp, &qdp, &qp))
		return NULL;
	if (qd != p->saddr || qs != p->daddr || (qp != IPPROTO_TCP_ && qp != IPPROTO_UDP_))
		return NULL;
	k->guest = qd;
	k->remote = qs;
	k->gport = qdp;
	k->rport = qsp;
	k->proto = qp;
	*quoted = 1;
	return bpf_map_lookup_elem(&agent_flows, k);
}

#endif
