/* structs.h: every map key and value, the single source of truth for the Go
 * side (bpf2go -type generates the Go types from these definitions). */
#ifndef AZG_STRUCTS_H
#define AZG_STRUCTS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include "consts.h"

/* An IPv4 or IPv6 address in network byte order. IPv4 uses a[0] and leaves
 * a[1..3] zero; the family travels next to it. */
struct ip_addr {
	__be32 a[4];
};

/* IPv6 addresses read as two 8-byte words (issue 21: half the loads and
 * compares of four 4-byte ones). Only in map values and the packet: the
 * verifier refuses an 8-byte access to the stack that is not 8-byte
 * aligned, and a struct ip_addr is aligned to 4. may_alias: the same
 * bytes are read as a[] elsewhere. */
typedef __u64 __attribute__((__may_alias__)) addr_w64;

/* a and b (16 bytes each) equal */
static __always_inline int ip6w_eq(const void *a, const void *b)
{
	const addr_w64 *x = a, *y = b;
	return !((x[0] ^ y[0]) | (x[1] ^ y[1]));
}

static __always_inline void ip6w_copy(void *dst, const void *src)
{
	((addr_w64 *)dst)[0] = ((const addr_w64 *)src)[0];
	((addr_w64 *)dst)[1] = ((const addr_w64 *)src)[1];
}

/* a[0] ^ a[1] ^ a[2] ^ a[3] ^ b[0] ^ b[1] ^ b[2] ^ b[3] */
static __always_inline __u32 ip6w_xor2(const void *a, const void *b)
{
	const addr_w64 *x = a, *y = b;
	__u64 w = x[0] ^ x[1] ^ y[0] ^ y[1];
	return (__u32)w ^ (__u32)(w >> 32);
}

/* MAC copies of the IPv6 paths in word loads and stores (a 6-byte
 * __builtin_memcpy of unknown alignment is 12 byte-wise instructions): the
 * packet and the room (a map value) are where the verifier checks no
 * alignment, and the x86-64 and arm64 JITs load unaligned words. mac2_copy
 * copies a destination and source MAC pair (12 bytes). */
static __always_inline void mac_copy(void *dst, const void *src)
{
	*(__u32 *)dst = *(const __u32 *)src;
	*(__u16 *)(dst + 4) = *(const __u16 *)(src + 4);
}

static __always_inline void mac2_copy(void *dst, const void *src)
{
	((__u32 *)dst)[0] = ((const __u32 *)src)[0];
	((__u32 *)dst)[1] = ((const __u32 *)src)[1];
	((__u32 *)dst)[2] = ((const __u32 *)src)[2];
}

/* a[0] ^ a[1] ^ a[2] ^ a[3] */
static __always_inline __u32 ip6w_xor(const void *a)
{
	const addr_w64 *x = a;
	__u64 w = x[0] ^ x[1];
	return (__u32)w ^ (__u32)(w >> 32);
}

/* Key of the EIP route map (edge) and of the agent's EIP and guest maps. */
struct eip_key {
	struct ip_addr addr;
	__u8 family; /* AF_INET or AF_INET6 */
	__u8 pad[3];
};

/* Edge: where an EIP lives. One entry per bound EIP. */
struct eip_route {
	struct ip_addr host; /* underlay address of the AZ host the EIP is bound to */
	__u32 vsid;          /* NVGRE virtual subnet of the guest */
	__u32 stats_idx;     /* slot in eip_stats */
	__u8 family;         /* family of host */
	__u8 flags;
	__u16 lgen;          /* a VIP's listener generation: bumped after a
			      * listener of the VIP is removed or narrowed (see
			      * lb_decide); 0 for an EIP */
};

/* Edge: a drifting EIP's previous binding (eip_prev; its route is
 * flagged ROUTE_F_DRIFT): the host it was bound to before its move and
 * its guest's VSID there (make-before-break drift, edge.c drift_pick). In
 * a map of its own, read on the drift path only: eip_routes' entries stay
 * as small. */
struct eip_prev {
	__be32 host; /* underlay IPv4 address */
	__u32 vsid;
	__u32 flags; /* PREV_F_* */
};

/* Edge: a TCP flow to an EIP that drifts (ROUTE_F_DRIFT), recorded when
 * its SYN went to the live binding (edge.c drift_pick): key of
 * drift_flows, for IPv4 and IPv6 EIPs (IPv4 uses a[0]). The value is the
 * live host's underlay address (__be32) at the SYN: a flow recorded for
 * another live host (an earlier drift) counts as not recorded. */
struct drift_key {
	struct ip_addr eip;
	struct ip_addr client;
	__be32 ports;  /* client port, EIP port, as on the wire */
	__u8 family;   /* AF_INET or AF_INET6 */
	__u8 proto;
	__u8 pad[2];
};

/* Edge: edge_rooms.drift, per-CPU room for edge.c's drift
 * functions: a flow's key and its EIP's route key. */
struct drift_room {
	struct drift_key k;
	struct eip_key ek;
};

/* Edge: a slot of the per-CPU EIP route cache (edge.c, eip_route4): an
 * IPv4 route copied out of eip_routes, valid while gen equals the route
 * generation + 1 (eip_route_gen; a zeroed slot never matches). */
struct eip_centry {
	__be32 addr;      /* the EIP or VIP */
	__be32 host;      /* eip_route.host.a[0] */
	__u32 vsid;
	__u32 stats_idx;
	__u64 gen;        /* eip_route_gen + 1 when copied */
	__u8 flags;       /* eip_route.flags */
	__u8 pad;
	__u16 lgen;       /* eip_route.lgen */
	__u32 fw;         /* firewall scope and flags (FW_C_*, lib/fw.h) when copied */
};

/* Edge: a slot of the per-CPU IPv6 EIP route cache (edge.c, eip_route6),
 * as struct eip_centry for IPv6 addresses. */
struct eip_centry6 {
	struct ip_addr addr; /* the IPv6 EIP */
	__be32 host;         /* eip_route.host.a[0] */
	__u32 vsid;
	__u32 stats_idx;
	__u8 flags;          /* eip_route.flags, with ROUTE_F_RL_* (route6_extra) */
	__u8 pad;
	__u16 lgen;          /* eip_route.lgen (an IPv6 VIP's listener generation) */
	__u64 gen;           /* eip_route_gen + 1 when copied */
	__u32 fw;            /* firewall scope and flags (FW_C_*, lib/fw.h fw_dest6) when copied */
	__u32 pad2;
};

/* Per-EIP counters (per CPU). rx: Internet -> guest, tx: guest -> Internet.
 * rx_syns: of rx, TCP SYNs without ACK (connection attempts), counted by the
 * edge only; the controller's DDoS detection reads their rate (docs/ddos.md).
 * The agent's map has the same value (it leaves rx_syns at 0). */
struct eip_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 rx_syns;
};

/* One slot of the per-reason counter array (per CPU). */
struct stat_entry {
	__u64 packets;
	__u64 bytes;
};

/* Edge configuration, one entry, written by the edge daemon. */
struct edge_config {
	struct ip_addr underlay; /* source of encapsulated packets; decap destination */
	struct ip_addr icmp_src; /* source of ICMP errors sent to the Internet */
	__u32 hash_seed;         /* cluster-wide flow hash seed */
	__u32 icmp_rate;         /* unread: the daemon writes icmp_kinds (was the one ICMP budget) */
	__u32 icmp_burst;
	__u32 flags;             /* CFG_F_* */
	__u32 nh_gen;            /* bumped on routing changes: invalidates nh_cache */
	__u32 ul_ifindex;        /* the underlay interface: NVGRE is only taken from it,
				  * decapsulated packets never go back out of it */
	__u8 gw_mac[6];          /* inner Ethernet source: the edge's virtual router MAC */
	__u16 pad;
};

/* Agent: an EIP hosted on this host, keyed by the EIP. */
struct agent_eip {
	struct ip_addr private_addr; /* guest address the EIP is translated to */
	__u32 vsid;
	__u32 stats_idx;
	__u8 family;
	__u8 flags;  /* AGENT_F_*: AGENT_F_SVC, the guest is a service backend too */
	__u16 group; /* agent_groups index: the edges of the set that serves the EIP */
};

/* Agent: a local guest with an EIP, keyed by its private address. */
struct agent_guest {
	struct ip_addr eip;
	__u32 vsid;
	__u32 stats_idx;
	__u32 ifindex; /* host-side interface the guest must send from (anti-spoofing) */
	__u8 family;
	__u8 flags;    /* AGENT_F_*: AGENT_F_SVC, look its replies up in agent_flows */
	__u16 group;   /* agent_groups index: the edges its EIP's replies go to */
};

/* Agent configuration, one entry, written by the agent daemon. */
struct agent_config {
	struct ip_addr underlay; /* this host's underlay address */
	struct ip_addr icmp_src; /* source of ICMP errors sent to guests */
	__u32 hash_seed;
	__u32 icmp_rate;  /* unread: the daemon writes icmp_kinds from them */
	__u32 icmp_burst;
	__u32 flags;
	__u32 nh_gen; /* bumped on routing changes: invalidates nh_cache */
	__u8 gw_mac[6];
	__u16 pad;
	/* An IPv6 underlay (:: none; grown at the end, the IPv4 fields keep
	 * their place): NVGRE over IPv6 is taken to it from the edges
	 * ul6_hosts names (agent.c agent_ul6_in), and is the outer source
	 * toward them (agent_push6). */
	struct ip_addr underlay6;
	/* The source of ICMPv6 errors sent to guests (packet too big for
	 * the tunnel, lib/icmp6.h; :: sends none): --icmp-source6, else the
	 * IPv6 underlay address. Grown at the end as underlay6. */
	struct ip_addr icmp_src6;
};

/* Agent: the live members of one edge set, which the replies of the
 * addresses the set serves are spread over by flow hash (agent_groups,
 * issue 8). Written whole by the agent daemon. */
struct agent_group {
	__u32 n;                    /* live members: edges[0..n) */
	__u16 gen;                  /* bumped when a member leaves (or the slot
				     * changes set): a flow keeps its edge only
				     * while its generation is the group's */
	__u16 pad;
	__be32 edges[EDGE_SET_MAX]; /* underlay addresses (an IPv6 one by its name,
				     * ul6_hosts), in a stable order */
	__u8 set[SET_NAME_LEN];     /* the set's name, NUL-padded (the daemon
				     * adopts its slots by it after a restart) */
};

/* One slot of the next-hop cache: a bpf_fib_lookup result (see lib/fib.h). */
struct nh_entry {
	__be32 dst;        /* what was looked up ... */
	__u32 ifindex_in;  /* ... from which interface */
	__u8 smac[6];
	__u8 dmac[6];
	__u32 ifindex;     /* egress */
	__u32 mtu;         /* route MTU */
	__u32 gen;         /* config nh_gen when cached */
	__u8 bucket;       /* ... for which flow-hash bucket (ECMP: lib/fib.h) */
	__u8 pad[3];
	__u64 expires;     /* jiffies */
};

/* The IPv6 next-hop cache's entry (nh_cache6, lib/fib.h fib6f): nh_entry
 * with a 16-byte destination. */
struct nh_entry6 {
	struct ip_addr dst; /* what was looked up ... */
	__u32 ifindex_in;   /* ... from which interface */
	__u8 smac[6];
	__u8 dmac[6];
	__u32 ifindex;      /* egress */
	__u32 mtu;          /* route MTU */
	__u32 gen;          /* config nh_gen when cached */
	__u8 bucket;        /* ... for which flow-hash bucket */
	__u8 pad[3];
	__u64 expires;      /* jiffies */
};

/* Key of an IPv4 LPM trie. */
struct lpm4_key {
	__u32 prefixlen;
	__be32 addr;
};

/* Key of an IPv6 LPM trie (edge_spoof_src6). */
struct lpm6_key {
	__u32 prefixlen;
	struct ip_addr addr;
};

/* One rule of agent_local: protocol (0: any, then every port) and
 * destination ports lo..hi (host order; TCP and UDP only: another
 * protocol's rule names no ports, 0..0). */
struct local_rule {
	__u8 proto;
	__u8 pad;
	__u16 lo;
	__u16 hi;
};

/* Value of agent_local: what a guest may send to the prefix, the rules of
 * every shorter prefix covering it included (the agent merges them: the
 * trie finds the longest prefix only). */
struct local_allow {
	__u32 n;
	struct local_rule r[LOCAL_RULES_MAX];
};

/* Per-CPU token bucket for ICMP errors. */
struct icmp_bucket {
	__u64 tokens; /* scaled by 1e9 */
	__u64 last_ns;
};

/* ICMP error budget of one kind (icmp_kinds, lib/stats.h), written by
 * the daemon with the config (the agent's every kind from its config's
 * icmp_rate and icmp_burst, which the program no longer reads). */
struct icmp_kind_cfg {
	__u32 rate;  /* errors per second per CPU (0: never send) */
	__u32 burst;
};

/* Edge and agent: the bandwidth limit of one EIP as configured (eip_bw,
 * keyed by address; lib/bw.h). Written by Go (SetEIPBandwidth); the edge
 * reads it only when it fills a route cache slot (ROUTE_F_BW). The packet
 * path reads the copy in the EIP's eip_bw_slots entry. */
struct eip_bw {
	__u64 ns_per_byte_q20; /* 8e9 / rate (bits/s), fixed point with 20 fraction bits */
	__u64 tau;             /* burst * ns per byte: how far ahead tat may run */
	__u64 rate;            /* bits per second, as configured (read back by Go; unread here) */
	__u32 burst;           /* bytes, as configured (unread here) */
	__u32 pad;
};

/* Edge and agent: one EIP's byte-counting GCRA bucket, shared by every
 * CPU (eip_bw_slots, indexed by the EIP's stats_idx, as eip_stats; lib/bw.h).
 * tat is a virtual time in ns: the moment the bucket would be empty again;
 * a packet of len bytes costs len * ns_per_byte_q20 >> 20 ns of it and
 * conforms while the TAT after charging it is at most tau ahead of now.
 * addr names the EIP the bucket belongs to: a slot another EIP reuses
 * without a limit keeps a stale bucket, which addr tells apart. Written by
 * Go (the limit, addr; zeroed when a new EIP takes the slot); tat and the
 * drop counters by the programs (cmpxchg, atomic add). 48 bytes. Grow only
 * at the end (docs/upgrades.md). */
struct eip_bw_slot {
	__u64 tat;             /* virtual time, ns (bw_now: the tick clock), shared */
	__u64 ns_per_byte_q20; /* copied from eip_bw */
	__u64 tau;             /* copied from eip_bw */
	__u64 drop_packets;    /* dropped here since the EIP took the slot (atomic) */
	__u64 drop_bytes;      /* their IP bytes (atomic) */
	__be32 addr;           /* the EIP (IPv4) whose bucket this is; 0: none */
	__u32 pad;
};

/* Edge: an IPv6 EIP's bandwidth limit with its bucket (eip_bw6, lib/bw.h
 * bw6_over): keyed by the EIP itself, so no slot to check (b.addr unused);
 * rate and burst as configured, read back by Go. */
struct eip_bw6 {
	struct eip_bw_slot b;
	__u64 rate;
	__u32 burst;
	__u32 pad;
};

/* Edge: the rate limits of one EIP or VIP (edge_limits, lib/ratelimit.h),
 * as GCRA (the virtual-scheduling form of a token bucket, ITU-T I.371):
 * a packet conforms while the bucket's theoretical arrival time (TAT) is
 * at most tau ahead of now, and pushes it one interval further. Intervals
 * and tolerances in ns; an interval of 0 turns that limit off. */
struct rl_dst {
	__u64 src_ns;   /* per source: ns between packets (1e9 / packets per second) */
	__u64 src_tau;  /* per source: (burst - 1) * src_ns */
	__u64 syn_ns;   /* SYN guard: ns between SYNs to this destination */
	__u64 syn_tau;  /* SYN guard: (burst - 1) * syn_ns */
	__u64 syn_tat;  /* SYN guard state, shared by every CPU (cmpxchg) */
	__u64 drop_src; /* packets dropped by the per-source limit (atomic) */
	__u64 drop_syn; /* SYNs dropped by the guard (atomic) */
	__u32 src_pps;  /* as configured (read back by the daemon; unread here) */
	__u32 src_burst;
	__u32 syn_rate;
	__u32 syn_burst;
};

/* Edge: key of the per-source state (edge_rl_src): a source and the EIP
 * or VIP it sends to; the value is the pair's TAT (ns). */
struct rl_src_key {
	__be32 src;
	__be32 dst;
};

/* Edge: key of the per-source state of IPv6 sources (edge_rl_src6): the
 * source's /64 (an attacker holds whole /64s: keyed by the address, one
 * host would own 2^64 buckets) and the IPv6 EIP it sends to. */
struct rl_src6_key {
	__be32 src64[2];
	struct ip_addr dst;
};

/* Edge: rl6_check's per-CPU scratch (edge_rooms.rl6): the key and
 * value it passes to the map helpers (the IPv6 path has no stack left). */
struct rl6_scratch {
	struct rl_src6_key k;
	__u64 v;
};

/* Edge: the IPv6 settings beside edge_config (edge_cfg6, one entry; the
 * IPv4 entry keeps its size). */
struct edge_config6 {
	struct ip_addr icmp_src; /* source of ICMPv6 errors sent to the Internet; :: sends none */
	struct ip_addr underlay; /* IPv6 underlay address: the outer source toward the
				  * hosts with an IPv6 underlay, NVGRE over IPv6 taken
				  * to it; :: none (an IPv6 host's packets dropped) */
};

/* Edge: a tunnel over the IPv6 underlay a path asked for (edge.c
 * ul6_ask), for tunnel6 to build from xdp_edge's frame (in edge_rooms.ul6). */
struct ul6_req {
	__u64 im;      /* inner destination MAC | UL6_INNER6 | counter << 56 */
	__be32 host;   /* the host's name (UL6_HOST) */
	__u32 key;     /* GRE key: VSID << 8 | FlowID */
	__u32 idx;     /* the slot counting it: eip_stats (encap_tx) or lb_be_stats */
	__u16 ip_len;  /* the inner packet's length */
	__u8 l3_off;   /* its offset in the frame */
	__u8 tos;
	__u8 df;
	__u8 syn;      /* a TCP SYN without ACK (eip_stats.rx_syns) */
	__u8 pad[2];
};

/* Edge: the outer headers of NVGRE over IPv6 from a host (edge.c
 * ul6_from_host), as edge_from_host reads an IPv4 outer header's: the
 * frame's offsets and the host's name (UL6_HOST) in place of the outer
 * source (in edge_rooms.ul6; lib/entry.h copies it into the entry's struct
 * pkt). */
struct ul6_outer {
	__u32 l3_off;  /* the outer IPv6 header */
	__u32 l4_off;  /* the GRE header */
	__u16 ip_len;  /* the outer packet's length, its header included */
	__u16 frag;    /* a fragment header's offset and MF (never reassembled) */
	__be32 host;   /* the sending host's name: ul6_hosts' of the outer source */
	__be32 daddr;  /* the edge's IPv4 underlay address (0: none) */
};

/* Edge: the IPv6 underlay's per-CPU room (edge_rooms.ul6). */
struct ul6_room {
	struct ul6_req req;
	struct ul6_outer out;
	struct ip_addr key; /* tunnel6's key of ul6_hosts (a host's name) */
};

/* Edge: icmp6_error's per-CPU scratch (edge_rooms.icmp6): what it keeps
 * across the helpers it calls (the IPv6 path has no stack left). */
struct icmp6_room {
	struct ip_addr src; /* the error's source (edge_config6.icmp_src) */
	struct ip_addr dst; /* the offending packet's source */
	__u32 l3;           /* link header length: 14, 18 or 22 */
	__u32 quote;        /* bytes of the offending packet quoted */
	__u32 mtu;          /* packet too big's MTU (0: time exceeded) */
	__u32 kind;         /* ICMP_KIND_TTL or ICMP_KIND_FRAG: the budget */
};

/* Traffic generator template (bench.c). */
struct gen_config {
	__u8 tmpl[64];   /* Ethernet+IP+UDP header written over every frame */
	__u32 tmpl_len;
	__u32 flows;     /* source ports cycle over this many flows */
	__u16 sport_base;
	__u16 udp_off;   /* the UDP header's offset: 0 is 34 (Ethernet+IPv4),
			  * 54 for Ethernet+IPv6 */
};

/* A monitor event (lib/monitor.h), fixed size, in mon_events. */
struct mon_event {
	__u64 ts;      /* bpf_ktime_get_ns */
	__u64 seq;     /* this CPU's count of MON_K_IN events: pairs a frame's events */
	__u32 reason;  /* enum azg_stat (0 for MON_K_IN) */
	__u32 kind;    /* MON_K_* */
	__u32 ifindex; /* the interface it came in on */
	__u32 cpu;
	__u32 len;     /* the frame's length at the event */
	__u32 snap;    /* bytes of it in data */
	__u8 data[MON_SNAP];
};

/* The monitor's state per CPU (mon_state): its token bucket and counts. */
struct mon_state {
	__u64 tokens;    /* in 1e-9 events */
	__u64 last_ns;
	__u64 seq;
	__u64 sent;      /* events written to the ring */
	__u64 lost_rate; /* events the bucket refused */
	__u64 lost_full; /* events the full ring had no room for */
};

/* Counter indices of the stats array. Keep in step with the names in
 * internal/dataplane (a test holds them together). */
enum azg_stat {
	STAT_PASS_NON_IP = 0,      /* not IPv4/IPv6: to the kernel */
	STAT_PASS_IPV6,       /* valid IPv6 not to an IPv6 EIP: to the kernel */
	STAT_PASS_NOT_OURS,   /* IPv4 not for an EIP / not NVGRE to us: to the kernel */
	STAT_ENCAP_TX,        /* edge: Internet -> host encapsulated; agent: guest -> edge */
	STAT_DECAP_TX,        /* edge: host -> Internet; agent: edge -> guest */
	STAT_DECAP_PASS,      /* decapsulated, handed to the kernel to resolve a neighbour */
	STAT_ICMP_TTL_TX,     /* ICMP time exceeded sent */
	STAT_ICMP_FRAG_TX,    /* ICMP fragmentation needed sent */
	STAT_DROP_ETH_TRUNC,  /* shorter than an Ethernet header, or bad VLAN stack */
	STAT_DROP_IP_TRUNC,   /* IPv4 header or total length beyond the frame */
	STAT_DROP_IP_BAD,     /* version, IHL or total length invalid */
	STAT_DROP_IP_CSUM,    /* IPv4 header checksum wrong */
	STAT_DROP_IP_MARTIAN, /* source is 0/8, 127/8, multicast or broadcast */
	STAT_DROP_L4_TRUNC,   /* TCP/UDP/ICMP header cut short in a first fragment */
	STAT_DROP_GRE_BAD,    /* GRE to us that is not NVGRE (flags, version, protocol) */
	STAT_DROP_INNER_BAD,  /* malformed inner frame in NVGRE */
	STAT_DROP_SPOOF,      /* inner source not an EIP bound to the sender */
	STAT_DROP_UNKNOWN,    /* NVGRE for an EIP/VSID not hosted here */
	STAT_DROP_TTL,        /* TTL expired (ICMP sent or rate limited) */
	STAT_DROP_TOO_BIG,    /* does not fit the underlay MTU and DF is clear */
	STAT_DROP_FIB,        /* no route, blackhole, forwarding disabled */
	STAT_DROP_NO_NEIGH,   /* next hop not resolved */
	STAT_DROP_HEADROOM,   /* could not grow or shrink the frame */
	STAT_DROP_ICMP_LIMIT, /* ICMP error suppressed by the rate limit */
	STAT_DROP_NO_EDGE,    /* agent: no edge configured to send replies to */
	STAT_DROP_BAD_DST,    /* decapsulated packet to a destination never forwarded
			       * (0/8, 127/8, multicast, broadcast, class E) or back
			       * into the underlay */
	STAT_LB_ENCAP_TX,     /* to a service backend in NVGRE */
	STAT_LB_NAT_TX,       /* to a service backend, DNAT */
	STAT_LB_REPLY_TX,     /* service reply back to the client (SNAT or decap) */
	STAT_LB_ICMP_TX,      /* ICMP error steered to the backend owning the flow */
	STAT_ARP_REPLY,       /* ARP reply for a VIP */
	STAT_DROP_LB_NO_BACKEND, /* listener with no usable backend */
	STAT_DROP_LB_NO_PORT, /* VIP without a listener for this protocol and port */
	STAT_LB_NAT_PASS,     /* nat mode, translated, handed to the kernel to resolve a neighbour */
	STAT_DROP_NO_EIP,     /* agent: a guest without an EIP sent to the outside what no flow
			       * entry translates (a new connection of its own, a later fragment) */
	STAT_FLOW_NEW,        /* agent: a decapsulated packet wrote its flow entry (new or changed) */
	STAT_DROP_SPOOF_OWN,  /* edge: from the Internet side, source one of the region's own
			       * set prefixes, EIPs or VIPs (source = destination included) */
	STAT_DROP_SPOOF_UNDERLAY, /* edge: from the Internet side, source in the underlay */
	STAT_DROP_SPOOF_BOGON, /* edge: from the Internet side, source non-routable: 10/8,
				* 172.16/12, 192.168/16, 100.64/10, 169.254/16 (0/8, 127/8
				* and 224/3 are drop_ip_martian on every side) */
	STAT_DROP_RL_SOURCE,  /* edge: over its EIP's or VIP's per-source packet rate (lib/ratelimit.h) */
	STAT_DROP_RL_SYN,     /* edge: a SYN over its EIP's or VIP's SYN rate (lib/ratelimit.h) */
	STAT_DROP_FW_DENY,    /* edge: a firewall deny rule matched (lib/fw.h) */
	STAT_DROP_FW_PRIVATE, /* edge: the destination has an allow list and no allow rule matched */
	STAT_PASS_HC_REPLY,   /* edge: a checked backend's answer to the health check, to the kernel (lib/hc.h) */
	STAT_DROP_BW,         /* over its EIP's bandwidth limit (lib/bw.h): edge from the Internet, agent from the guest */
	STAT_PASS_LOCAL,      /* agent: a guest's packet an agent_local rule allows, to the host's kernel */
	STAT_DROP_LOCAL,      /* agent: a guest's packet to a local prefix no rule of it allows, or to
			       * its host's own addresses or the underlay (never encapsulated) */
	STAT_DROP_IP6_EXT_LIMIT, /* IPv6: more extension headers than parse.h walks (IPV6_MAX_EXT),
				  * or the upper-layer header past the first 255 bytes */
	STAT_DROP_IP6_EXT_BAD, /* IPv6: malformed extension header chain (hop-by-hop not first,
				* two fragment headers, a header beyond the payload) */
	STAT_DROP_IP6_RH0,    /* IPv6: routing header type 0 (RFC 5095) */
	STAT_DROP_IP6_TINY_FRAG, /* IPv6: a first fragment without the whole header chain and
				  * upper-layer header (RFC 7112) */
	STAT_DROP_IP6_MARTIAN, /* IPv6 source ::, ::1, multicast or IPv4-mapped (:: allowed for
				* ICMPv6 to ff02::/16: DAD, MLD); destination ::, ::1,
				* IPv4-mapped or multicast of scope 0 or 1 */
	STAT_DROP_IP6_OFF_LINK, /* edge: IPv6 link-local source to a destination neither link-local
				 * nor multicast, not ICMPv6 (fe80::/10 off-link) */
	STAT_DROP_IP6_UDP_CSUM0, /* agent: IPv6 UDP with a zero checksum (RFC 8200 8.1: none is
				  * not allowed; not computed over the payload here) */
	STAT_DRIFT_PREV_TX,   /* edge: to a drifting EIP (ROUTE_F_DRIFT), a TCP segment of a flow not
			       * recorded (not SYN): steered to the previous binding (counted with
			       * encap_tx when sent) */
	STAT_DRIFT_FLOW_NEW,  /* edge: to a drifting EIP, a SYN's flow recorded in drift_flows */
	STAT_DRIFT_FLOW_FAIL, /* edge: to a drifting EIP, drift_flows refused a SYN's flow (not
			       * dropped: the SYN goes to the live binding; its flow's next
			       * segments go to the previous one) */
	STAT_NDP_REPLY,       /* edge: neighbor advertisement for an IPv6 VIP or arp_addrs6 address
			       * (lib/ndp.h; the IPv6 twin of arp_reply) */
	STAT_DROP_NDP_HOP_LIMIT, /* edge, ARP owner: a neighbor solicitation on an ARP interface
				  * with a hop limit other than 255 (RFC 4861 7.1.1) */
	STAT_DROP_NDP_SHORT,  /* edge, ARP owner: a neighbor solicitation under 24 bytes */
	STAT_DROP_NDP_CSUM,   /* edge, ARP owner: a neighbor solicitation with a bad ICMPv6 checksum */
	STAT_DROP_NDP_TARGET, /* edge, ARP owner: a neighbor solicitation for a multicast target */
	STAT_DROP_NDP_BAD,    /* edge, ARP owner: a neighbor solicitation otherwise invalid (code
			       * not 0, over NDP_NS_MAX bytes, over NDP_OPTS_MAX options, an option
			       * of length 0 or past the end, from :: with a source link-layer address option or not to
			       * a solicited-node group) */
	STAT_MAX,
};

/* Firewall (lib/fw.h). Key of fw_rules, an LPM trie: the destination
 * scope (0: the global rules; a set's or an address's otherwise), always
 * matched whole, then the source prefix; prefixlen = 32 + source bits. */
struct fw_key {
	__u32 prefixlen;
	__u32 scope;
	__be32 saddr;
};

/* One rule an fw_rules entry carries. */
struct fw_ref {
	__u32 rule;    /* index in fw_stats */
	__u8 action;   /* FW_DENY or FW_ALLOW */
	__u8 proto;    /* IP protocol, 0: any */
	__u16 port_lo; /* destination ports, host order (0-65535: every port) */
	__u16 port_hi;
	__u16 pad;
};

/* An fw_rules entry: every rule of its scope whose source prefix contains
 * the entry's prefix (the planner pushes a shorter prefix's rules down into
 * the longer ones it contains), so the longest match alone decides. */
struct fw_entry {
	__u32 n; /* rules in r */
	struct fw_ref r[FW_REFS];
};

/* fw_dst value (by destination address) and fw_global's one entry. */
struct fw_dst {
	__u32 scope; /* fw_dst: the destination's scope; fw_global: unused */
	__u32 flags; /* FW_C_GLOBAL, FW_C_PRIVATE */
	__u8 nlens;  /* fw_global: source prefix lengths in lens (FW_NO_BLOOM: too many) */
	__u8 lens[FW_LENS];
};

/* A slot of the firewall's per-CPU verdict cache (fw_vcache, lib/fw.h):
 * the verdict for (source, the destination's eip_centry.fw, protocol and
 * port), valid while gen equals the route generation + 1 (the edge bumps
 * it after every firewall write). */
struct fw_vslot {
	__u64 gen;
	__be32 saddr;
	__u32 fw;
	__u32 pp;      /* protocol << 17 | port (0x10000: none) */
	__u32 verdict; /* FW_V_* | rule */
};

/* Key of fw_rules6, the IPv6 sources' trie (struct fw_key for IPv6):
 * prefixlen = 32 + source bits. */
struct fw_key6 {
	__u32 prefixlen;
	__u32 scope;
	struct ip_addr saddr;
};

/* A slot of the IPv6 verdict cache (fw_vcache6): struct fw_vslot with an
 * IPv6 source, which k holds as fw_rules6's key (fw6_check searches the
 * trie with it: no stack is left on that path), and rule, fw_stats's key
 * of the verdict's rule. */
struct fw_vslot6 {
	__u64 gen;
	struct fw_key6 k; /* k.saddr: the source; prefixlen and scope: the last search's */
	__u32 fw;
	__u32 pp;
	__u32 verdict;
	__u32 rule;
};

/* Per-rule counters (fw_stats, per CPU). */
struct fw_stats {
	__u64 packets;
	__u64 bytes;
};

/* Service listener key: a VIP, protocol and port (one-port listeners;
 * ranges and any-port listeners are in struct lb_ranges). */
struct lb_key {
	__be32 vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* Where a listener's new flows go. */
struct lb_listener {
	__u32 table; /* slot in lb_tables (the table's size M is its inner
		      * map's max_entries: see lib/lb.h) */
};

/* Port ranges of a (VIP, protocol): key of lb_ranges. */
struct lb_rkey {
	__be32 vip;
	__u8 proto;
	__u8 pad[3];
};

/* One range listener: ports lo..hi (host order, inclusive). */
struct lb_range {
	__u16 lo;
	__u16 hi;
	struct lb_listener l;
};

/* The range listeners of a (VIP, protocol), sorted by lo and disjoint,
 * searched with a bounded binary search; and its any-port listener. */
struct lb_ranges {
	__u32 n;       /* ranges in r */
	__u32 has_any; /* any is the any-port listener */
	struct lb_listener any;
	__u32 pad;
	struct lb_range r[LB_RANGES_MAX];
};

/* A backend of any service, indexed by the daemon. */
struct lb_backend {
	__be32 addr;   /* nat: the backend's address; encap: the host's underlay address */
	__be32 guest;  /* encap: the guest's private address (carried in the inner MAC) */
	__u32 vsid;    /* encap: the guest's VSID */
	__be16 port;   /* nat: backend port (0: the listener's port) */
	__u16 gen;     /* bumped when the slot is given to another backend */
	__u8 flags;    /* LB_BE_* */
	__u8 mode;     /* LB_MODE_* of its service */
	__u16 pad;
	__u64 owner;   /* the daemon's: a hash of the backend's identity, so a
			* restarted daemon finds the slots it had */
};

/* Connection table key: a flow as the edge sees it. */
struct ct_key {
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* IPv6 VIPs (issue 21): the listener, range-set and connection keys of
 * struct lb_key, lb_rkey and ct_key with 16-byte addresses, in maps of
 * their own (lb_listeners6, lb_ranges6, lb_conns6), so the IPv4 keys stay
 * as small as they were. The values (struct lb_listener, lb_ranges,
 * ct_entry), the Maglev tables and the backend slots are shared. */
struct lb_key6 {
	struct ip_addr vip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct lb_rkey6 {
	struct ip_addr vip;
	__u8 proto;
	__u8 pad[3];
};

/* A 40-byte key and the 12-byte struct ct_entry: 52 bytes of key and
 * value an IPv6 flow, where an IPv4 one has 16 + 12 = 28. */
struct ct_key6 {
	struct ip_addr src; /* the client */
	struct ip_addr dst; /* the VIP */
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

/* nat mode for IPv6 VIPs (issue 21): struct nat_rkey, nat_bkey and
 * nat_rentry with 16-byte addresses, in maps of their own
 * (lb_nat_conns6, lb_nat_backends6), so the IPv4 entries stay as small
 * as they were: 40 + 20 bytes a connection's reverse entry. */
struct nat_rkey6 {
	struct ip_addr baddr; /* the backend */
	struct ip_addr caddr; /* the client */
	__be16 bport;
	__be16 cport;
	__u8 proto;
	__u8 pad[3];
};

struct nat_bkey6 {
	struct ip_addr baddr;
	__be16 bport;
	__u8 proto;
	__u8 pad;
};

/* nat_bkey6's protocol in lb_nat_backends6's key of a backend slot's
 * address (baddr's last word the slot index in host order, the rest and
 * the port 0; the value's vip is the address). */
#define NAT6_SLOT_PROTO 0

struct nat_rentry6 {
	struct ip_addr vip;
	__be16 vport;
	__u16 pad;
};

/* The IPv6 VIP paths' keys (in edge_rooms.lb6, struct lb6_room, lib/maps.h):
 * the flow's connection key and the listener keys built from it, off the
 * stack that xdp_edge already fills. */
struct lb6_keys {
	struct ct_key6 k;
	struct lb_key6 lk;
	struct lb_rkey6 rk;
	struct nat_rkey6 nk;   /* nat: the reply tuple (lb_nat_conns6) */
	struct nat_bkey6 nb;   /* nat: the fallback's key (lb_nat_backends6) */
	struct nat_rentry6 nv; /* nat: the VIP and port a reply leaves with */
};

/* Connection table entry (client -> VIP flows): the backend the flow was
 * given. In nat mode its replies are translated back by the reverse entry
 * the connection installed (lb_nat_conns); in encap mode the agent knows
 * them. */
struct ct_entry {
	__u16 backend; /* < LB_BACKENDS_MAX */
	__u16 gen;     /* the backend's generation at insert (all of it: a
			* narrower copy would take a slot reused 256 times
			* for the backend the entry was made for) */
	__u8 state;    /* CT_* */
	__u8 fid;      /* NVGRE FlowID of the flow: the flow hash's low byte,
			* kept so a hit needs no hash */
	__u16 lgen;    /* the VIP's listener generation (eip_route.lgen) when
			* the entry was made or last found with its listener */
	__u32 last;    /* jiffies (low 32 bits) when last seen */
};

/* nat mode: a connection's replies as they leave the backend (backend ->
 * client), installed when the connection's entry is made ... */
struct nat_rkey {
	__be32 baddr;
	__be32 caddr;
	__be16 bport;
	__be16 cport;
	__u8 proto;
	__u8 pad[3];
};

/* nat mode, stateless fallback (lb_nat_backends): a backend's address,
 * port and protocol, which the plan gives to exactly one VIP and port. */
struct nat_bkey {
	__be32 baddr;
	__be16 bport;
	__u8 proto;
	__u8 pad;
};

/* ... and the VIP and port they are translated back to. */
struct nat_rentry {
	__be32 vip;
	__be16 vport;
	__u16 pad;
};

/* Connection sync: a connection entry made or changed, as the edge's peers
 * must learn it (lib/lb.h ct_emit -> ct_events; internal/connsync). The
 * backend is this edge's slot and generation: the reader turns them into
 * the backend's identity (lb_backend.owner; a slot given to another
 * backend since has another generation, and its event is dropped), and
 * the time into an age, before anything leaves the machine. */
struct ct_event {
	struct ct_key key;
	__u16 backend; /* ct_entry.backend */
	__u16 gen;     /* ct_entry.gen */
	__u32 last;    /* jiffies (low 32 bits) of the event */
	__u8 state;    /* CT_* */
	__u8 fid;      /* the entry's FlowID */
	__u8 kind;     /* CT_EV_* */
	__u8 pad;
};

/* Connection sync of an IPv6 VIP's entry (lb_conns6; lib/lb.h ct_emit6):
 * struct ct_event with the 40-byte key, 52 bytes. It shares the ring
 * ct_events with the IPv4 records, which stay 28 bytes: the reader tells
 * the two apart by the record's length. */
struct ct_event6 {
	struct ct_key6 key;
	__u16 backend; /* ct_entry.backend */
	__u16 gen;     /* ct_entry.gen */
	__u32 last;    /* jiffies (low 32 bits) of the event */
	__u8 state;    /* CT_* */
	__u8 fid;      /* the entry's FlowID */
	__u8 kind;     /* CT_EV_* */
	__u8 pad;
};

/* Service settings, one entry. Timeouts in jiffies. */
struct lb_config {
	__u32 hz;            /* jiffies per second */
	__u32 to_syn;        /* TCP until the handshake completes */
	__u32 to_est;        /* TCP established */
	__u32 to_fin;        /* TCP after FIN or RST */
	__u32 to_udp;        /* UDP and other protocols */
	__u32 insert_rate;   /* new connection entries per second per CPU (0: no cap) */
	__u32 insert_burst;
	__u32 flags;         /* LB_CFG_* */
};

/* Per-CPU token bucket capping connection-table inserts. */
struct ct_bucket {
	__u64 tokens; /* scaled by hz */
	__u64 last;   /* jiffies */
};

/* Per-backend counters (per CPU). */
struct lb_counters {
	__u64 packets;
	__u64 bytes;
	__u64 conns; /* connection entries created */
};

/* ARP answering: the MAC to answer with on an interface. */
struct arp_iface {
	__u8 mac[6];
	__u16 pad;
};

/* ARP ownership (issue 8, part 6): the edge answers ARP only while
 * bpf_ktime_get_ns() < until_ns, the deadline of its claim on its set's
 * ARP scope (0: another member owns it). Enforced here and not only by
 * the daemon, so an owner whose daemon dies or freezes stops answering
 * by itself before another member can take over. */
struct arp_owner {
	__u64 until_ns;
};

/* Agent: an address a guest interface may send from. */
struct if_addr {
	__u32 ifindex;
	__be32 addr;
};

/* Agent: a service backend guest on this host, by (VIP, guest, port). */
struct svc_key {
	__be32 vip;
	__be32 guest;
	__be16 vport; /* 0: any port */
	__u8 proto;
	__u8 pad;
};

struct svc_entry {
	__be16 bport; /* 0: keep the port */
	__u16 group;  /* agent_groups index: the edges of the set that serves the VIP */
	__u32 vsid;
};

/* Agent flow table key: a flow as the guest's replies carry it (the guest's
 * address and port, the remote's address and port, the protocol). */
struct agent_flow_key {
	__be32 guest;
	__be32 remote;
	__be16 gport;
	__be16 rport;
	__u8 proto;
	__u8 pad[3];
};

/* Agent flow table entry: the public side the flow came in through, for its
 * replies (see bpf/lib/agentflow.h). */
struct agent_flow {
	__be32 pub;       /* the EIP or VIP the flow was sent to */
	__be32 edge;      /* underlay address of the edge that sent it (an IPv6 one: its name, ul6_hosts) */
	__be16 pport;     /* the public port it was sent to */
	__u16 gen;        /* the group's generation when edge was learnt */
	__u32 vsid;       /* the guest's VSID */
	__u32 ifindex;    /* host-side interface of the guest (0: unknown) */
	__u16 group;      /* agent_groups index of the set serving pub, or
			   * AGENT_GROUP_PIN (a health check: back to edge) */
	__u16 pad;
};

/* Agent: a service backend guest on this host behind an IPv6 VIP (encap
 * mode), by (VIP, guest, port): the guest is named by its IPv4 private
 * address, as the edge names it in the inner destination MAC (SVC_MAC0,
 * SVC_MAC1 + the address: the backend slots are shared with IPv4 VIPs).
 * agent_svc6; svc_key's IPv4 entries stay as small. */
struct svc6_key {
	struct ip_addr vip;
	__be32 guest;
	__be16 vport; /* 0: any port */
	__u8 proto;
	__u8 pad;
};

struct svc6_entry {
	struct ip_addr guest6; /* the guest's IPv6 address (address6) the VIP is translated to */
	__be16 bport;          /* 0: keep the port */
	__u16 group;           /* agent_groups index: the edges of the set that serves the VIP */
	__u32 vsid;
	__u32 ifindex;         /* host-side interface of the guest: its flows' replies must come from it */
};

/* Agent IPv6 flow table key (agent_flows6): agent_flow_key with 16-byte
 * addresses, a flow as the guest's replies carry it. */
struct agent_flow6_key {
	struct ip_addr guest;
	struct ip_addr remote;
	__be16 gport;
	__be16 rport;
	__u8 proto;
	__u8 pad[3];
};

/* Agent IPv6 flow table entry: struct agent_flow with a 16-byte public
 * address (the IPv6 VIP or EIP the flow came in through). */
struct agent_flow6 {
	struct ip_addr pub; /* the IPv6 VIP or EIP the flow was sent to */
	__be32 edge;        /* underlay address of the edge that sent it (an IPv6 one: its name) */
	__be16 pport;       /* the public port it was sent to */
	__u16 gen;          /* the group's generation when edge was learnt */
	__u32 vsid;         /* the guest's VSID */
	__u32 ifindex;      /* host-side interface of the guest (0: unknown) */
	__u16 group;        /* agent_groups index of the set serving pub */
	__u16 pad;
};

/* Informational counters (not outcomes): see enum lb_info. */
enum lb_info {
	LBI_CT_MISS = 0,
	LBI_CT_INSERT,
	LBI_CT_INSERT_LIMITED, /* over the insert cap: forwarded by the table alone */
	LBI_CT_STALE,          /* expired, or its backend gone or down */
	LBI_SYN_REPICK,        /* a SYN that did not reuse an existing entry */
	LBI_NAT_REPLY_STATELESS, /* a nat reply with no entry translated by
				  * lb_nat_backends (entry not synced yet) */
	LBI_MAX,
};


/* A frame saved for the benchmarks' restore (bench_frame). */
struct bench_frame {
	__u8 data[BENCH_COPY]; /* the frame's first bytes */
	__u32 len;             /* the frame's length */
	__u32 pad;
};

/* Per-CPU room for a bpf_fib_lookup request (64 bytes): kept off the
 * stack, which the main program and its global functions share (512
 * bytes in all). */
struct fib_room {
	__u64 b[8]; /* a struct bpf_fib_lookup (bpf2go cannot type its unions) */
};
_Static_assert(sizeof(struct fib_room) == sizeof(struct bpf_fib_lookup), "fib_room must hold a bpf_fib_lookup");

/* ---- health checks through the tunnel (lib/hc.h) ---- */
/* What a health-check socket's mark stands for: the backend to reach. */
struct hc_target {
	__be32 host;  /* underlay address of the backend's host */
	__be32 guest; /* the guest's private address */
	__u32 vsid;   /* the guest's VSID */
	__u32 pad;
};

/* What an IPv6 guest's health-check mark stands for (hc_marks6): the
 * backend to reach at its IPv6 address (a map of its own: hc_marks'
 * IPv4 entries stay 16 bytes). */
struct hc_target6 {
	__be32 host;          /* the host's underlay address or IPv6 name (UL6_HOST) */
	__u32 vsid;           /* the guest's VSID */
	struct ip_addr guest; /* the guest's private IPv6 address */
};

/* A backend a reply to HC or HC6 may come from (the reverse of hc_marks
 * and hc_marks6): one map for both families (xdp_edge holds the 64 maps
 * the kernel allows a program), an IPv4 guest in guest.a[0], the rest 0
 * (no IPv6 guest address is in ::/96: the edge daemon refuses one). */
struct hc_peer {
	__be32 host;
	__u32 vsid;
	struct ip_addr guest;
};

/* hc6_reply's socket lookup tuple: struct bpf_sock_tuple's ipv6 member,
 * in the edge's room (edge_room6.tup). */
struct hc6_tuple {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
};

/* Outcomes of the health-check path, per CPU (hc_stats). Keep in step with
 * hcStatNames in internal/dataplane/hc.go (a test holds them together). */
enum hc_stat {
	HC_STAT_PROBE_TX = 0,  /* a probe packet encapsulated toward its host */
	HC_STAT_REPLY_PASS,    /* a reply to HC decapsulated and passed up */
	HC_STAT_DROP_NO_MARK,  /* from HC with a mark hc_marks does not know */
	HC_STAT_DROP_BAD,      /* not an IPv4 packet from HC to the mark's guest */
	HC_STAT_DROP_FIB,      /* no route to the host through the underlay */
	HC_STAT_DROP_HEADROOM, /* could not make room for the headers */
	HC_STAT_DROP_PEER,     /* NVGRE to HC from a (host, VSID, guest) not checked */
	HC_STAT_DROP_DIRECT,   /* a packet to HC outside the tunnel */
	HC_STAT_DROP_NO_SOCK,  /* a checked backend's packet to HC no probe socket is connected for */
	HC_STAT_MAX,
};


/* Agent: a port an edge's health check reaches a guest on through the
 * tunnel (agent_hc_guests): the guest's private address, the checked port
 * and the protocol (TCP or UDP). */
struct hc_guest_key {
	__be32 guest;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* Agent: the same for an IPv6 guest's address (agent_hc_guests6). */
struct hc_guest6_key {
	struct ip_addr guest;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

/* agent_hc_guests6's value: the guest's VSID and its interface (an IPv6
 * flow's entry names the guest's interface, which its replies must come
 * from: struct agent_flow6's ifindex). */
struct hc_guest6 {
	__u32 vsid;
	__u32 ifindex;
};

#endif
