/* agenthc.h: health checks that travel the tunnel (issue 7, section 4),
 * the agent's half (the edge's is lib/hc.h).
 *
 * An edge checks an encap-mode backend by sending NVGRE whose inner
 * destination is the guest's private address itself (neither an EIP nor a
 * VIP: the probe's source is the edge's own health-check address). The
 * agent delivers it when the address is a guest of this host on the
 * packet's VSID (agent_hc_guests), untranslated, and records the flow in
 * agent_flows as a VIP flow is recorded (public address = the private one,
 * so the reply is not translated: no SNAT), so the guest's answer goes back
 * in NVGRE to the edge that sent the probe. NVGRE is only taken from the
 * edges (agent_edge_set) as for every other path. */
#ifndef AZG_AGENTHC_H
#define AZG_AGENTHC_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Its map (agent_hc_guests) is in maps.h. */

/* Whether addr is a guest of this host on vsid (a health check's
 * destination). */
static __always_inline int hc_guest_ok(__be32 addr, __u32 vsid)
{
	__u32 *v = bpf_map_lookup_elem(&agent_hc_guests, &addr);
	return v && *v == vsid;
}

#endif
