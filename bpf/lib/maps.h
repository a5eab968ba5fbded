/* maps.h: every BPF map of the azgate programs, with a comment each; their
 * sizes are the #defines of consts.h, their keys and values the structs of
 * structs.h (after Katran's balancer_maps.h). One header for all programs:
 * a program defines which one it is before its includes (AZG_PROG_EDGE in
 * edge.c, AZG_PROG_AGENT in agent.c) and gets its maps; bench.c, the
 * benchmark harness, defines neither and gets bench_frame only (its own
 * generator maps stay in bench.c). Go holds its capacity constants to
 * these (internal/dataplane TestCapacitiesMatchC). */
#ifndef AZG_MAPS_H
#define AZG_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "consts.h"
#include "structs.h"
#include "parse.h" /* struct pkt6, in the edge's per-CPU rooms */

#if defined(AZG_PROG_EDGE) && defined(AZG_PROG_AGENT)
#error "define one of AZG_PROG_EDGE and AZG_PROG_AGENT"
#endif

/* ---- the benchmark harness (bench.c, lib/benchmode.h) ---- */
#if !defined(AZG_PROG_EDGE) && !defined(AZG_PROG_AGENT)

/* The frame xdp_chain (bench.c) restores before each run (lib/benchmode.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_frame);
} bench_frame SEC(".maps");
#endif

#if defined(AZG_PROG_EDGE) || defined(AZG_PROG_AGENT)

/* ---- edge and agent: counters (lib/stats.h), next hops (lib/fib.h) ---- */

/* The monitor's events (struct mon_event, lib/monitor.h), read by
 * `azgate monitor` and `azgate capture` from the pin (root only). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MON_EVENTS_BYTES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mon_events SEC(".maps");

/* The monitor's token bucket and counts (events sent, refused by the rate
 * limit, by a full ring), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mon_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mon_state SEC(".maps");

/* Packets and bytes per outcome (enum azg_stat), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, enum azg_stat);
	__type(value, struct stat_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} stats SEC(".maps");

/* Token buckets limiting the ICMP errors this program generates, one per
 * kind (ICMP_KIND_*), per CPU. (It replaced icmp_buckets, one bucket for
 * every kind; the state need not outlive the program: not pinned.) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ICMP_KIND_MAX);
	__type(key, __u32);
	__type(value, struct icmp_bucket);
} icmp_budgets SEC(".maps");

/* The budget of each ICMP error kind (ICMP_KIND_*), written by the daemon
 * with the config (an unwritten one sends nothing). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ICMP_KIND_MAX);
	__type(key, __u32);
	__type(value, struct icmp_kind_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} icmp_kinds SEC(".maps");

/* Next-hop cache (lib/fib.h): (destination, ingress interface, ECMP bucket) slot -> next hop, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NH_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nh_entry);
} nh_cache SEC(".maps");

/* The IPv6 underlay's names, both ways in one map (a program holds 64
 * maps at most). On the edge, the hosts with an IPv6 underlay address; on
 * the agent, the edges it reaches over an IPv6 underlay (their underlay6).
 * A peer's name (the IPv4 address 0.0.0.0/8 + its index i, 1 to
 * UL6_HOSTS_MAX - 1, in a[0], a[1..3] zero) -> its IPv6 address, read by
 * the encapsulation (edge.c tunnel6, agent.c agent_push6); its address ->
 * its name in a[0], for the NVGRE it sends (edge.c ul6_from_host, agent.c
 * agent_ul6_in). The keys never collide: a name is in ::/8, which holds
 * no peer's address (global unicast). A map field of 4 bytes that names a
 * peer (an edge's route or backend host, the agent's edge set, groups and
 * flows' edge) holds its name (UL6_HOST, consts.h), so the IPv4 entries
 * keep their size. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * UL6_HOSTS_MAX);
	__type(key, struct ip_addr);
	__type(value, struct ip_addr);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* an IPv4 underlay holds none */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} ul6_hosts SEC(".maps");

/* The IPv6 next-hop cache (lib/fib.h fib6f): nh_cache for IPv6
 * destinations, (destination, ingress interface, ECMP bucket) slot ->
 * next hop, per CPU, invalidated by the same nh_gen and TTL. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NH6_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nh_entry6);
} nh_cache6 SEC(".maps");

#endif

#ifdef AZG_PROG_EDGE

/* ---- edge: per-CPU rooms, off the 512-byte stack ---- */

/* The IPv6 VIP paths' keys and the packet edge_ipv6 hands to lb6_ingress
 * (edge.c). */
struct lb6_room {
	struct lb6_keys keys;
	struct pkt6 p6;
	__u32 host; /* lb6_reply_ok's arguments, kept here: its frame */
	__u32 vsid; /* is under edge_pull_failed's */
	__u32 fin;
	__u32 idx;       /* and lb6_nat_in's: the backend's slot, */
	__u32 nat_bport; /* its port (0: the listener's), */
	__u32 nat_fp;    /* the flow's FlowID | LB_PF_ICMP */
};

/* edge_pull_failed's IPv6 packet, route key and outer MACs (host ->
 * Internet for IPv6 guests; beneath xdp_edge's frame, with fib6_miss's
 * and drop_counted's below it, its own must stay small). */
struct edge_room6 {
	struct pkt6 p6;
	struct eip_key k;
	__u8 ours[ETH_ALEN_];
	__u8 peer[ETH_ALEN_];
	/* hc6_reply (lib/hc.h): the hc_peers key and the socket lookup's
	 * tuple (struct bpf_sock_tuple's ipv6 half, which bpf2go cannot
	 * type as a union). */
	struct hc_peer hk;
	struct hc6_tuple tup;
};
_Static_assert(__builtin_offsetof(struct edge_room6, peer) == __builtin_offsetof(struct edge_room6, ours) + ETH_ALEN_,
	       "mac2_copy copies ours and peer as one 12-byte pair");

/* Every per-CPU room of the edge, one field each, in one map: the kernel
 * takes at most 64 maps a program (MAX_USED_MAPS), and xdp_edge is near
 * it; the rooms are disjoint, so a path that holds two (lb6_ingress's
 * lb6 and fib_room's fib) never sees one overwrite the other. */
struct edge_rooms {
	struct fib_room fib;     /* a bpf_fib_lookup request (lib/fib.h fib_room) */
	struct drift_room drift; /* drift_pick's and drift_out's keys */
	struct rl6_scratch rl6;  /* rl6_check's keys (lib/ratelimit.h) */
	struct icmp6_room icmp6; /* icmp6_error's state (lib/icmp.h) */
	struct lb6_room lb6;     /* the IPv6 VIP paths */
	struct edge_room6 e6;    /* edge_pull_failed */
	struct ul6_room ul6;     /* the IPv6 underlay: ul6_ask's request for
				  * tunnel6, ul6_from_host's outer headers */
};

/* The edge's per-CPU rooms (struct edge_rooms, one entry): read through
 * EDGE_ROOM. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct edge_rooms);
} edge_rooms SEC(".maps");

/* EDGE_ROOM(f): this CPU's room f of edge_rooms, or NULL. */
#define EDGE_ROOM(f)                                                        \
	({                                                                  \
		__u32 room_zero_ = 0;                                       \
		struct edge_rooms *rooms_ = bpf_map_lookup_elem(&edge_rooms, &room_zero_); \
		rooms_ ? &rooms_->f : NULL;                                 \
	})

/* ---- edge: EIPs (edge.c) ---- */

/* EIP -> the host it is bound to; a VIP -> a route flagged ROUTE_F_VIP
 * (its service is in lib/lb.h). Written by the edge daemon from etcd. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_MAX);
	__type(key, struct eip_key);
	__type(value, struct eip_route);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_routes SEC(".maps");

/* The route generation: bumped by the edge daemon after every write to
 * eip_routes (internal/dataplane: PutRoutes, DeleteRoutes, PutVIP,
 * DeleteVIP); it invalidates every eip_cache slot at once. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_route_gen SEC(".maps");

/* A direct-mapped per-CPU cache of eip_routes (IPv4), a slot per address
 * hash: a hit is an inlined array lookup and two compares, where the hash
 * lookup is a call of __htab_map_lookup_elem with three more returns inside
 * (about 30 ns on a CPU with the SRSO mitigation, see BENCHMARKS.md). A
 * colliding address takes the slot over. Only found routes are cached. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EIP_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct eip_centry);
} eip_cache SEC(".maps");

/* The same for IPv6 EIPs (edge.c eip_route6). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EIP6_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct eip_centry6);
} eip_cache6 SEC(".maps");

/* Drifting EIPs' TCP flows whose SYN went to the live binding (struct
 * drift_key -> the live host's underlay address then; edge.c
 * drift_pick), both families; least recently used evicted: an evicted
 * flow's next segments go to the previous binding. Sized by --drift-flows. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DRIFT_FLOWS_MAX);
	__type(key, struct drift_key);
	__type(value, __be32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} drift_flows SEC(".maps");

/* A drifting EIP (ROUTE_F_DRIFT) -> its previous binding. Written by the
 * edge daemon before the route's flag, removed after it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_PREV_MAX);
	__type(key, struct eip_key);
	__type(value, struct eip_prev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_prev SEC(".maps");

/* Per-EIP packet and byte counters, indexed by eip_route.stats_idx. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EIP_MAX);
	__type(key, __u32);
	__type(value, struct eip_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_stats SEC(".maps");

/* ---- edge: rate limits (lib/ratelimit.h) ---- */

/* EIP or VIP -> its rate limits and its SYN guard's shared state. Written
 * by the edge daemon; a write bumps eip_route_gen, so the route cache
 * learns which destinations have limits (ROUTE_F_LIMITS). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RL_DST_MAX);
	__type(key, __be32);
	__type(value, struct rl_dst);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_limits SEC(".maps");

/* (source, EIP or VIP) -> the pair's bucket (a TAT in ns), one for every
 * CPU (updated with cmpxchg), least recently used evicted. Only for
 * destinations with a per-source limit. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RL_SRC_MAX);
	__type(key, struct rl_src_key);
	__type(value, __u64);
} edge_rl_src SEC(".maps");

/* The same for IPv6 EIPs (lib/ratelimit.h rl6_check): IPv6 EIP -> its
 * limits, as edge_limits; not preallocated (until the model takes IPv6
 * EIPs it stays empty, and 10 MiB preallocated for nothing would be). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RL_DST_MAX);
	__type(key, struct ip_addr);
	__type(value, struct rl_dst);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_limits6 SEC(".maps");

/* (source /64, IPv6 EIP) -> the pair's bucket, as edge_rl_src. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, RL_SRC6_MAX);
	__type(key, struct rl_src6_key);
	__type(value, __u64);
} edge_rl_src6 SEC(".maps");

/* The edge's own addresses and settings (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct edge_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cfg SEC(".maps");

/* The edge's IPv6 settings (struct edge_config6, one entry): beside
 * edge_cfg, whose entry keeps its size. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct edge_config6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_cfg6 SEC(".maps");


/* ---- edge: services (lib/lb.h) ---- */

/* (VIP, protocol, port) -> listener; port 0 is the any-port listener. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_LISTENERS_MAX);
	__type(key, struct lb_key);
	__type(value, struct lb_listener);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_listeners SEC(".maps");

/* (VIP, protocol) -> its port-range listeners and any-port listener: a
 * range is one entry whatever its length. Allocated as used (a set is 528
 * bytes). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_RANGE_SETS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb_rkey);
	__type(value, struct lb_ranges);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_ranges SEC(".maps");

/* A Maglev table: slot -> backend index. Tables of any prime size share
 * the outer map (BPF_F_INNER_MAP). */
struct lb_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_TABLE_DEFAULT_M);
	__uint(map_flags, BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, __u32);
};

/* Maglev tables by slot; the daemon builds a new inner map and swaps it in
 * with one update, so a table changes atomically: the table's size M is
 * the inner map's own max_entries (lb_table_m), so the one value swapped
 * names both the slots and their number. A packet never indexes a new
 * table with an old M, or the reverse. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, LB_TABLES_MAX);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct lb_table);
} lb_tables SEC(".maps");

/* Backends of every service by index. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_BACKENDS_MAX);
	__type(key, __u32);
	__type(value, struct lb_backend);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_backends SEC(".maps");

/* The daemon's record of which pool each table slot serves (a hash of its
 * identity), so a restarted daemon swaps tables into the slots listeners
 * already point at. Never read by the data plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_TABLES_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_table_owner SEC(".maps");

/* The connection table, shared by all services (sized by the daemon). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT_MAX);
	__type(key, struct ct_key);
	__type(value, struct ct_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conns SEC(".maps");

/* IPv6 VIPs (issue 21): lb_listeners, lb_ranges and lb_conns keyed by
 * 16-byte addresses (struct lb_key6, lb_rkey6, ct_key6); the tables,
 * backends, counters and settings are the IPv4 VIPs'. The connection
 * table is sized by the daemon as lb_conns is; the listener map holds a
 * quarter of lb_listeners' entries by default (IPv6 VIPs are new). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_LISTENERS6_MAX);
	__type(key, struct lb_key6);
	__type(value, struct lb_listener);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_listeners6 SEC(".maps");

/* (IPv6 VIP, protocol) -> its range and any-port listeners (lb_ranges). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_RANGE_SETS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lb_rkey6);
	__type(value, struct lb_ranges);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_ranges6 SEC(".maps");

/* IPv6 flows' connection table (lb_conns' IPv6 twin; CT6_MAX by default,
 * sized by the daemon: --ct-size6). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT6_MAX);
	__type(key, struct ct_key6);
	__type(value, struct ct_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_conns6 SEC(".maps");

/* The load balancer's settings: timeouts in jiffies, insert cap, nat flag (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_cfg SEC(".maps");

/* Caps connection-table inserts per CPU (SYN floods fall back to the
 * table alone, with no state). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ct_bucket);
} ct_buckets SEC(".maps");

/* Per-backend counters (index = backend index). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_BACKENDS_MAX);
	__type(key, __u32);
	__type(value, struct lb_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_be_stats SEC(".maps");

/* nat mode, stateful: each connection's reply tuple (backend -> client) ->
 * the VIP and port its replies leave with, installed with the connection's
 * entry (sized as the connection table, by the daemon). A backend's own
 * connections (no entry) are not translated; one backend port may serve
 * any number of VIPs and ports. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT_MAX);
	__type(key, struct nat_rkey);
	__type(value, struct nat_rentry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_nat_conns SEC(".maps");

/* nat mode, stateless fallback: a backend (address, port, protocol) that
 * serves exactly one VIP and port -> that VIP and port, written by the
 * daemon from the plan. A reply with no lb_nat_conns entry (the SYN went
 * to another member of the set and its entry is not synced yet) is
 * translated by it; a backend of two VIPs or ports is not in it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_NAT_BACKENDS_MAX);
	__type(key, struct nat_bkey);
	__type(value, struct nat_rentry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_nat_backends SEC(".maps");

/* nat mode for IPv6 VIPs, stateful: lb_nat_conns' IPv6 twin, each IPv6
 * nat connection's reply tuple -> its VIP and port (sized by the daemon
 * as lb_conns6 is). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CT6_MAX);
	__type(key, struct nat_rkey6);
	__type(value, struct nat_rentry6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_nat_conns6 SEC(".maps");

/* nat mode for IPv6 VIPs, stateless fallback: lb_nat_backends' IPv6 twin
 * (the plan's backends of one VIP and port). lb_backends' addr holds
 * IPv4 only: an IPv6 nat backend slot's address is here too, under its
 * slot's key (NAT6_SLOT_PROTO, no nat backend's protocol; the address in
 * the value's vip; lib/lb.h lb6_nat_addr), not in a map of its own:
 * xdp_edge uses the 64 maps the kernel allows a program. Hence twice
 * LB_NAT_BACKENDS_MAX entries (sized by the daemon: twice --backend-max),
 * allocated as used. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * LB_NAT_BACKENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nat_bkey6);
	__type(value, struct nat_rentry6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_nat_backends6 SEC(".maps");

/* Ingress anti-spoofing: source prefixes never taken from the Internet
 * side (the region's set prefixes, EIPs and VIPs: SPOOF_OWN; the underlay:
 * SPOOF_UNDERLAY), written by the edge daemon. The non-routable ranges are
 * fixed in the program (spoof_class). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SPOOF_PREFIX_MAX);
	__type(key, struct lpm4_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_spoof_src SEC(".maps");

/* The same for IPv6 sources (edge.c spoof6_class): the region's IPv6 set
 * prefixes and EIPs (SPOOF_OWN). The IPv6 bogons are fixed in the
 * program. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SPOOF_PREFIX_MAX);
	__type(key, struct lpm6_key);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} edge_spoof_src6 SEC(".maps");

/* Firewall (lib/fw.h), written by the edge daemon from the plan
 * (internal/fwplan): the rules by (scope, source prefix), longest match. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, FW_ENTRIES_MAX);
	__type(key, struct fw_key);
	__type(value, struct fw_entry);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_rules SEC(".maps");

/* Firewall: the scope of each EIP and VIP some set or address rule
 * applies to (the route cache copies it, eip_centry.fw). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_DST_MAX);
	__type(key, __be32);
	__type(value, struct fw_dst);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_dst SEC(".maps");

/* Firewall: whether global rules exist and make every destination
 * private (flags of its one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_dst);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_global SEC(".maps");

/* Firewall: a Bloom filter of the (scope, source prefix) keys of fw_rules,
 * one bit per key (lib/fw.h fw_bloom_bit, internal/fwplan BloomBit): a
 * source whose probes find no bit set skips the trie lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_BLOOM_WORDS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_bloom SEC(".maps");

/* Firewall: the per-CPU verdict cache (struct fw_vslot): a flood from
 * few sources is answered without the Bloom probes and the trie walk. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_VCACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct fw_vslot);
} fw_vcache SEC(".maps");

/* Firewall for IPv6 sources and destinations (lib/fw.h fw6_drop): the
 * rules by (scope, IPv6 source prefix), as fw_rules (the same scopes and
 * entries, fw_stats shared: a rule with sources of both families counts
 * in one slot). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, FW_ENTRIES_MAX);
	__type(key, struct fw_key6);
	__type(value, struct fw_entry);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_rules6 SEC(".maps");

/* Firewall: the scope of each IPv6 EIP some set or address rule applies
 * to (eip_centry6.fw), as fw_dst. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FW_DST_MAX);
	__type(key, struct ip_addr);
	__type(value, struct fw_dst);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_dst6 SEC(".maps");

/* Firewall: the per-CPU verdict cache of IPv6 sources (struct fw_vslot6). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_VCACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct fw_vslot6);
} fw_vcache6 SEC(".maps");

/* Firewall: packets and bytes each rule dropped (deny) or let through
 * (allow), by fw_ref.rule, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_RULES_MAX);
	__type(key, __u32);
	__type(value, struct fw_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} fw_stats SEC(".maps");

/* Connection sync: the connection entries made and changed (struct
 * ct_event), written only while ct_sync_on is set and read by
 * internal/connsync. Not pinned: each load gets its own, and the
 * program that writes it holds it. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CT_EVENTS_BYTES);
} ct_events SEC(".maps");

/* Connection events the ring buffer had no room for: a global (.bss), so
 * counting needs no stack (ct_emit is called at the deepest point of the
 * program, where the 512 bytes are all taken) and no map lookup. */
__u64 ct_events_lost;

/* Connection sync runs (set by the edge daemon through the loaded object,
 * never pinned: a program loaded by a daemon without sync writes no
 * events): only then does the program write ct_events. A global, not a
 * flag of lb_cfg, so the test needs no register kept across the helper
 * calls before it (lb_ingress has no stack to spare for a spill). */
volatile __u32 ct_sync_on;

/* Interfaces on which the edge answers ARP for its VIPs, with the MAC. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARP_IFACES_MAX);
	__type(key, __u32);
	__type(value, struct arp_iface);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} arp_ifaces SEC(".maps");

/* Until when this edge owns ARP for its set (index 0; see struct
 * arp_owner). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct arp_owner);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} arp_owner SEC(".maps");

/* Addresses the owner answers ARP for besides the VIPs, e.g. the gateway
 * nat-mode servers on the segment route their replies through (value
 * unused). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARP_ADDRS_MAX);
	__type(key, __be32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} arp_addrs SEC(".maps");

/* The IPv6 addresses the owner answers neighbor solicitations for besides
 * the IPv6 VIPs (the gateway6 of nat-mode servers; lib/ndp.h); value: the
 * advertisement's flags besides S and O (NA_F_ROUTER for a gateway). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARP_ADDRS_MAX);
	__type(key, struct ip_addr);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} arp_addrs6 SEC(".maps");

/* Informational counters by enum lb_info, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LBI_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} lb_info SEC(".maps");

/* ---- health checks through the tunnel (lib/hc.h) ---- */
/* mark -> backend, written by the edge daemon with each target set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HC_MARKS_MAX);
	__type(key, __u32);
	__type(value, struct hc_target);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hc_marks SEC(".maps");

/* mark -> an IPv6 guest's backend (struct hc_target6), written with
 * hc_marks; read by tc_edge_hc only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HC_MARKS_MAX);
	__type(key, __u32);
	__type(value, struct hc_target6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hc_marks6 SEC(".maps");

/* (host, VSID, guest) -> 1: the backends replies may come from, IPv4 and
 * IPv6 guests (struct hc_peer). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HC_PEERS_MAX);
	__type(key, struct hc_peer);
	__type(value, __u32);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* allocated as used: few backends are checked */
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hc_peers SEC(".maps");

/* Health-check path outcomes by enum hc_stat, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HC_STAT_MAX);
	__type(key, __u32);
	__type(value, struct stat_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} hc_stats SEC(".maps");

/* IPv6 EIP -> its bandwidth limit and bucket (struct eip_bw6; lib/bw.h
 * bw6_over), Internet -> IPv6 EIP. Written by Go (SetEIPBandwidth); a new
 * or removed entry bumps eip_route_gen (ROUTE_F_BW in eip_centry6). Not
 * preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_BW_MAX);
	__type(key, struct ip_addr);
	__type(value, struct eip_bw6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_bw6 SEC(".maps");

#endif /* AZG_PROG_EDGE */

#ifdef AZG_PROG_AGENT

/* ---- agent (agent.c, lib/agentflow.h) ---- */

/* EIP -> local guest it is bound to. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_EIP_MAX);
	__type(key, struct eip_key);
	__type(value, struct agent_eip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_eips SEC(".maps");

/* Guest private address -> its EIP. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_GUEST_MAX);
	__type(key, struct eip_key);
	__type(value, struct agent_guest);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_guests SEC(".maps");

/* Per-EIP counters, indexed by stats_idx. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, AGENT_EIP_MAX);
	__type(key, __u32);
	__type(value, struct eip_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_stats SEC(".maps");

/* Edge groups: index -> the live members of one edge set (group 0: of
 * every set, for addresses no set serves). agent_eips, agent_guests,
 * agent_svc and agent_flows entries name their group; replies go to a
 * live member of it (bpf/agent.c). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, AGENT_GROUP_MAX);
	__type(key, __u32);
	__type(value, struct agent_group);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_groups SEC(".maps");

/* Every edge of every set, live or not: NVGRE is only accepted from them
 * (a drained or dying member still delivers what reaches it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EDGE_MAX);
	__type(key, struct eip_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_edge_set SEC(".maps");

/* Destinations a guest's packet never goes to the edge for: what a rule
 * allows goes to the host's kernel, the rest is dropped (agent.c). */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, LOCAL_PREFIX_MAX);
	__type(key, struct lpm4_key);
	__type(value, struct local_allow);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_local SEC(".maps");

/* The agent's own addresses and settings (one entry). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agent_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_cfg SEC(".maps");

/* Source addresses each guest interface may send from (every guest of the
 * host, whether it has an EIP or not): anything else is spoofing. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_IFADDR_MAX);
	__type(key, struct if_addr);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_ifaddrs SEC(".maps");

/* Service backends on this host: (VIP, guest, port) -> backend port. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_SVC_MAX);
	__type(key, struct svc_key);
	__type(value, struct svc_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_svc SEC(".maps");

/* Flows that came in through a VIP: reply 5-tuple -> public side. One
 * table for every guest of the host, evicted least recently used. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, AGENT_FLOW_MAX);
	__type(key, struct agent_flow_key);
	__type(value, struct agent_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_flows SEC(".maps");

/* Service backends on this host behind an IPv6 VIP: (VIP, guest's IPv4
 * address, port) -> the guest's IPv6 address and backend port (agent.c,
 * agent_from_edge6). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_SVC6_MAX);
	__type(key, struct svc6_key);
	__type(value, struct svc6_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_svc6 SEC(".maps");

/* Flows that came in through an IPv6 VIP: reply 5-tuple -> public side,
 * as agent_flows (lib/agentflow.h's rules), with 16-byte addresses: a map
 * of its own, so agent_flows' IPv4 entries stay as small. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, AGENT_FLOW6_MAX);
	__type(key, struct agent_flow6_key);
	__type(value, struct agent_flow6);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_flows6 SEC(".maps");

/* ---- health checks from the edges (lib/agenthc.h) ---- */
/* The health-checked ports of this host's encap-mode backends: (private
 * address, port, protocol) -> the guest's VSID. Written by the agent daemon
 * from the services (only backends of a pool with a health check). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_HC_GUEST_MAX);
	__type(key, struct hc_guest_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_hc_guests SEC(".maps");

/* The same for the IPv6 addresses of this host's backends of IPv6 VIPs:
 * (address6, port, protocol) -> the guest's VSID and interface. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, AGENT_HC_GUEST_MAX);
	__type(key, struct hc_guest6_key);
	__type(value, struct hc_guest6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} agent_hc_guests6 SEC(".maps");

/* ---- the IPv6 EIP paths (agent.c) ---- */
/* Per-CPU room for agent_from_edge6 and agent_guest6: the IPv6 packet
 * (struct pkt6, lib/parse.h, hence the value's definition in agent.c),
 * a FIB request and MACs, off the 512-byte stack their callers' frames
 * mostly fill. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agent_room6);
} agent_scratch6 SEC(".maps");

/* Agent: IPv6 EIP -> its bandwidth limit and bucket (struct eip_bw6;
 * lib/bw.h bw6_over_eip), guest -> Internet from an IPv6 EIP, as the
 * edge's eip_bw6 on Internet -> IPv6 EIP. Written by Go (SetEIPBandwidth);
 * the guest's agent_guests entry carries AGENT_F_BW. Not preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_BW_MAX);
	__type(key, struct ip_addr);
	__type(value, struct eip_bw6);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_bw6 SEC(".maps");

#endif /* AZG_PROG_AGENT */

#if defined(AZG_PROG_EDGE) || defined(AZG_PROG_AGENT)
/* ---- edge and agent: per-EIP bandwidth limits (lib/bw.h) ---- */

/* EIP (IPv4) -> its bandwidth limit as configured: on the edge for
 * Internet -> EIP, on the agent for guest -> Internet. Written by Go
 * (SetEIPBandwidth); on the edge a new or removed entry bumps
 * eip_route_gen so the route cache learns which addresses have a limit
 * (ROUTE_F_BW), on the agent the guest's agent_guests entry carries
 * AGENT_F_BW. The buckets are in eip_bw_slots. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EIP_BW_MAX);
	__type(key, __be32);
	__type(value, struct eip_bw);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_bw SEC(".maps");

/* stats_idx -> the bucket of the EIP in that slot (the slot eip_stats
 * counts it in), shared by every CPU: the packet path finds it with an
 * array lookup (inlined by the verifier: no helper call) where a lookup
 * in eip_bw cost 30-40 ns (BENCHMARKS.md, "Bandwidth limits"). Go copies
 * the limit in when it sets it and when a route (edge) or EIP (agent)
 * with a limit is written, so the bucket follows the EIP's slot. Edge:
 * EIP_MAX entries (48 MiB), agent: AGENT_EIP_MAX (3 MiB). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EIP_BW_SLOTS);
	__type(key, __u32);
	__type(value, struct eip_bw_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} eip_bw_slots SEC(".maps");
#endif

#endif
