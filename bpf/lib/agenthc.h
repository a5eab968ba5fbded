/* agenthc.h: health checks that travel the tunnel (issue 7, section 4),
 * the agent's half (the edge's is lib/hc.h).
 *
 * An edge checks an encap-mode backend by sending NVGRE whose inner
 * destination is the guest's private address itself (neither an EIP nor a
 * VIP: the probe's source is the edge's own health-check address). The
 * agent delivers it only when it is TCP or UDP (unfragmented) to a port
 * an edge checks on a backend of this host on the packet's VSID
 * (agent_hc_guests: (address, port, protocol) -> VSID, which the agent
 * fills from the services' health checks only: a guest that is no checked
 * backend, another port, ICMP are not reachable this way), untranslated,
 * and records the flow in agent_flows as a VIP flow is recorded (public
 * address = the private one, so the reply is not translated: no SNAT), so
 * the guest's answer goes back in NVGRE to the edge that sent the probe.
 * NVGRE is only taken from the edges (agent_edge_set) as for every other
 * path. The inner source is not checked: the edges' health-check
 * addresses are not in the store (docs/dataplane.md, Known limits).
 *
 * An IPv6 probe (issue 21: an IPv6 VIP's backend checked at its guest's
 * IPv6 address from the edge's --health-source6) is taken the same way
 * by agent_from_edge6 (hc6_guest, agent_hc_guests6) and recorded in
 * agent_flows6, pinned to the probing edge. */
#ifndef AZG_AGENTHC_H
#define AZG_AGENTHC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "agentflow.h"

/* Its map (agent_hc_guests) is in maps.h. */

/* Whether in is a health check of an edge: TCP or UDP to a checked port of
 * a guest of this host on vsid. */
static __always_inline int hc_guest_ok(const struct pkt *in, __u32 vsid)
{
	if (!flow_ported(in))
		return 0;
	struct hc_guest_key k = {.guest = in->daddr, .port = pkt_dport(in), .proto = in->proto};
	__u32 *v = bpf_map_lookup_elem(&agent_hc_guests, &k);
	return v && *v == vsid;
}

/* The same for an IPv6 probe (agent_from_edge6's packet in, on vsid):
 * TCP or UDP (unfragmented) to a checked port of a guest's IPv6 address
 * (agent_hc_guests6, k its key's room). Returns the entry (the guest's
 * VSID and interface), or NULL. */
static __always_inline struct hc_guest6 *hc6_guest(const struct pkt6 *in, __u32 vsid, struct hc_guest6_key *k)
{
	if (!flow_ported(&in->p))
		return NULL;
	k->guest = in->daddr;
	k->port = pkt_dport(&in->p);
	k->proto = in->p.proto;
	k->pad = 0;
	struct hc_guest6 *v = bpf_map_lookup_elem(&agent_hc_guests6, k);
	return v && v->vsid == vsid ? v : NULL;
}

#endif
