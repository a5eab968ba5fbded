/* consts.h: limits and protocol constants shared by every azgate XDP program. */
#ifndef AZG_CONSTS_H
#define AZG_CONSTS_H

/* Capacity of the EIP route map and of its per-EIP counter array. The loader
 * may resize both at load time; this is the default (1M routes, the
 * control-plane load target, with headroom to 2^20). */
#ifndef EIP_MAX
#define EIP_MAX (1 << 20)
#endif

/* Edge underlay addresses an agent accepts NVGRE from (agent_edge_set):
 * every edge of every set of the region (100 sets of 32 on paper, with
 * headroom). */
#ifndef EDGE_MAX
#define EDGE_MAX 4096
#endif

/* Members of one edge set (model.MaxSetEdges): upstream routers spread a
 * prefix over at most this many equal-cost paths, and an agent's edge
 * group holds at most this many live members. */
#ifndef EDGE_SET_MAX
#define EDGE_SET_MAX 32 /* a power of two (bpf/agent.c masks by it) */
#endif

/* Edge groups an agent holds (agent_groups): group 0 (every edge, for
 * addresses no set serves) and one per edge set of the region. */
#ifndef AGENT_GROUP_MAX
#define AGENT_GROUP_MAX 256
#endif
/* The group of a flow that goes back to the edge it came from whatever
 * that edge's state (an edge's health check: only that edge wants the
 * answer). Never an index of agent_groups. */
#define AGENT_GROUP_PIN 65535 /* 0xffff */
/* Bytes of an edge set's name in its group (names are at most 63). */
#define SET_NAME_LEN 64

/* Next-hop cache: entries per CPU, and how long an entry may be used
 * without asking the FIB again (routing changes invalidate it at once
 * through the config's nh_gen; the TTL bounds staleness when the daemon
 * that bumps nh_gen is away). */
#ifndef NH_CACHE_SLOTS
#ifdef AZG_PROG_EDGE
/* The edge's cache holds NH_BUCKETS slots per destination (ECMP,
 * lib/fib.h): four times the default, so as many destinations fit
 * (16384 x 40 B = 640 KiB per CPU). */
#define NH_CACHE_SLOTS 16384
#else
#define NH_CACHE_SLOTS 4096 /* a power of two */
#endif
#endif
/* The IPv6 next-hop cache (nh_cache6, lib/fib.h fib6f): as many slots
 * as the IPv4 one, of 56 bytes (edge: 16384 x 56 B = 896 KiB per CPU;
 * agent: 4096, 224 KiB). */
#ifndef NH6_CACHE_SLOTS
#define NH6_CACHE_SLOTS NH_CACHE_SLOTS
#endif
/* 100 jiffies: at most 1 s whatever CONFIG_HZ (100 at least); jiffies
 * cost a memory read where a clock costs about 10 ns a packet. */
#define NH_CACHE_TTL_JIFFIES 100

/* EIP route cache (edge.c): slots per CPU, a power of two (32 bytes
 * each: 512 KiB per CPU). */
#ifndef EIP_CACHE_SLOTS
#define EIP_CACHE_SLOTS 16384
#endif

/* The IPv6 EIP route cache (edge.c eip_route6): slots per CPU, a power of
 * two (40 bytes each: 160 KiB per CPU; IPv6 EIPs are few yet). */
#ifndef EIP6_CACHE_SLOTS
#define EIP6_CACHE_SLOTS 4096
#endif

/* Load balancer sizes. */
#ifndef LB_LISTENERS_MAX
#define LB_LISTENERS_MAX (1 << 18)
#endif
#ifndef LB_TABLES_MAX
#define LB_TABLES_MAX 4096
#endif
#ifndef LB_BACKENDS_MAX
#define LB_BACKENDS_MAX 65536
#endif
#ifndef LB_LISTENERS6_MAX
#define LB_LISTENERS6_MAX (1 << 16)
#endif
#ifndef CT_MAX
#define CT_MAX (1 << 20)
#endif
/* IPv6 VIPs' flows (lb_conns6): a quarter of the IPv4 table by default,
 * its entry being twice as large (--ct-size6). */
#ifndef CT6_MAX
#define CT6_MAX (CT_MAX / 4)
#endif
/* nat backends (address, port, protocol) of exactly one VIP and port: the
 * reply path's stateless fallback (lb_nat_backends). */
#define LB_NAT_BACKENDS_MAX 65536
/* Port-range listeners per (VIP, protocol) (a power of two: the data plane
 * binary-searches them), and (VIP, protocol) pairs with ranges or an
 * any-port listener. */
#define LB_RANGES_MAX 64
#define LB_RANGE_SETS_MAX 65536
/* The inner-map template of lb_tables (model.DefaultTableSize): the daemon
 * creates each table with its own size M. */
#define LB_TABLE_DEFAULT_M 65537
/* Interfaces on which the edge answers ARP for its VIPs. */
#define ARP_IFACES_MAX 64
/* Addresses answered on them besides the VIPs (a set's gateway), per
 * family (arp_addrs, arp_addrs6). */
#define ARP_ADDRS_MAX 16
/* The longest neighbor solicitation (ICMPv6 message) the edge validates
 * and answers (lib/ndp.h): longer ones are dropped (drop_ndp_bad). */
#define NDP_NS_MAX 512
/* ... and the most options it walks in one (a solicitation carries one or
 * two, SEND's five, RFC 3971): more are dropped too. */
#define NDP_OPTS_MAX 6

/* Agent sizes, per host: EIPs hosted (and their counters), guests with an
 * EIP, (interface, address) pairs guests may send from, service backends
 * (VIP, guest, port). */
#define AGENT_EIP_MAX 65536
#define AGENT_GUEST_MAX 65536
#define AGENT_IFADDR_MAX 65536
#define AGENT_SVC_MAX 65536
#define AGENT_SVC6_MAX 16384 /* agent_svc6: services with an IPv6 VIP */

/* Bytes of a frame the benchmarks restore before each run
 * (lib/benchmode.h). */
#define BENCH_COPY 128

/* Rate limits (lib/ratelimit.h): EIPs and VIPs with limits, and the
 * (source, destination) pairs whose state is kept (least recently used
 * evicted; about 80 B each, 10 MiB in all, shared by every CPU). */
/* EIPs with a bandwidth limit (eip_bw), per node. */
#ifndef EIP_BW_MAX
#define EIP_BW_MAX 65536
#endif
/* Buckets (eip_bw_slots): one per stats slot, as eip_stats. */
#ifdef AZG_PROG_AGENT
#define EIP_BW_SLOTS AGENT_EIP_MAX
#else
#define EIP_BW_SLOTS EIP_MAX
#endif

#ifndef RL_DST_MAX
#define RL_DST_MAX 65536
#endif
#ifndef RL_SRC_MAX
#define RL_SRC_MAX (1 << 17)
#endif
/* (source /64, IPv6 EIP) pairs of edge_rl_src6: half of IPv4's (an LRU,
 * preallocated: 6 MiB), a /64 standing for a whole subnet of sources. */
#ifndef RL_SRC6_MAX
#define RL_SRC6_MAX (1 << 16)
#endif
/* Compare-and-swap attempts on a shared bucket before the packet is let
 * through uncharged (other CPUs won each round: they were charged). */
#define RL_CAS_TRIES 4

/* ICMP error budgets (icmp_kinds, icmp_budgets): one per kind, so a flood
 * of one kind (expired TTLs) cannot starve another (fragmentation needed:
 * path MTU discovery, RFC 1191). */
#define ICMP_KIND_TTL 0   /* time exceeded */
#define ICMP_KIND_FRAG 1  /* fragmentation needed */
#define ICMP_KIND_OTHER 2 /* any other error */
#define ICMP_KIND_MAX 3

/* eip_centry.flags only (never in eip_routes), set when the cache slot is
 * filled: the address has a per-source limit, a SYN guard (edge_limits). */
#define ROUTE_F_RL_SRC 0x80
#define ROUTE_F_RL_SYN 0x40
#define ROUTE_F_LIMITS (ROUTE_F_RL_SRC | ROUTE_F_RL_SYN)
/* eip_centry.flags only: the address has a bandwidth limit (eip_bw, lib/bw.h). */
#define ROUTE_F_BW 0x20

/* eip_route.flags: the address is a service VIP, not an EIP (one lookup
 * on the destination serves both, and everything else pays just one). */
#define ROUTE_F_VIP 0x1
/* eip_route.flags: an EIP that drifts (make-before-break, edge.c
 * drift_pick): host/vsid are the live binding, its eip_prev entry the
 * previous one, which keeps the TCP flows open at the move and may send
 * their replies. */
#define ROUTE_F_DRIFT 0x2
/* eip_prev.flags: every packet from the Internet goes to the previous
 * binding (the make-before-break delay: the live host's agent may not hold
 * the EIP yet), while replies are taken from both hosts (another edge may
 * already send new flows to the live one). */
#define PREV_F_ALL 0x1

/* eip_prev's capacity: the EIPs drifting at once, 16k (a move of every
 * guest of 16 hosts of 1,000 within one drift grace); --eip-max caps it. */
#ifndef EIP_PREV_MAX
#define EIP_PREV_MAX 16384
#endif

/* drift_flows' default size (--drift-flows sets it at load). */
#ifndef DRIFT_FLOWS_MAX
#define DRIFT_FLOWS_MAX 65536
#endif

#define LB_MODE_ENCAP 1
#define LB_MODE_NAT 2

#define LB_BE_DOWN 0x1 /* failed its health checks: its connections are rerouted */

#define CT_SYN 1
#define CT_EST 2
#define CT_FIN 3
#define CT_UDP 4


#define LB_CFG_NAT 0x1 /* some service is in nat mode: look replies up */

/* Connection sync (lib/lb.h, internal/connsync): bytes of the ring buffer
 * of connection events (a power of two pages). A record takes 40 bytes
 * (32 and the ring's 8-byte header): 8 MiB hold about 200k events, two
 * seconds of 100k new connections a second should the reader stall. */
#ifndef CT_EVENTS_BYTES
#define CT_EVENTS_BYTES (1 << 23)
#endif
/* The monitor (lib/monitor.h, internal/monitor): bytes of its ring buffer
 * (a power of two pages; a record takes 168 bytes and the ring's 8-byte
 * header: 256 KiB hold about 1,490 events), the bytes of each frame a
 * record carries, its flags and the kinds of events. */
#ifndef MON_EVENTS_BYTES
#define MON_EVENTS_BYTES (1 << 18)
#endif
#define MON_SNAP 128
#define MON_F_DROPS 0x1 /* an event for every drop (rate limited) */
#define MON_F_TRACE 0x2 /* also every frame as it comes in and every other verdict */
#define MON_K_IN 1      /* the frame as it came in (trace) */
#define MON_K_DROP 2    /* dropped: reason says why */
#define MON_K_PASS 3    /* handed to the kernel (trace) */
#define MON_K_OUT 4     /* sent (XDP_TX or a redirect), as sent (trace) */

#define CT_EV_NEW 1   /* an entry made (or replaced: another backend) */
#define CT_EV_STATE 2 /* an entry's TCP state changed (SYN -> EST -> FIN) */

/* Inner destination MAC of service traffic: 02:01 + the guest's private
 * IPv4 address, so the host's agent knows which guest the edge chose. */
#define SVC_MAC0 0x02
#define SVC_MAC1 0x01

/* Prefixes a guest may reach in its host's kernel (agent --local-allow),
 * and the (protocol, port range) rules of one prefix. */
#ifndef LOCAL_PREFIX_MAX
#define LOCAL_PREFIX_MAX 256
#endif
#define LOCAL_RULES_MAX 8

/* Source prefixes the edge refuses from the Internet side (edge_spoof_src):
 * the region's own set prefixes, EIPs and VIPs, and the underlay. */
#ifndef SPOOF_PREFIX_MAX
#define SPOOF_PREFIX_MAX 16384
#endif
/* edge_spoof_src values: which class a forged source is counted under. */
#define SPOOF_OWN 1      /* a set prefix, EIP or VIP of the region */
#define SPOOF_UNDERLAY 2 /* a host's or edge's underlay address or prefix */

/* Firewall (lib/fw.h): rules (and their counters, fw_stats), entries of
 * the (scope, source prefix) trie, destinations with rules of their own or
 * their set's (fw_dst), and rules one entry carries: every rule of the
 * scope whose source prefix contains the entry's (model.MaxFirewallRules,
 * model.MaxFirewallOverlap). 100k rules are the design target. */
#ifndef FW_RULES_MAX
#define FW_RULES_MAX 131072
#endif
#ifndef FW_ENTRIES_MAX
#define FW_ENTRIES_MAX (1 << 20)
#endif
#ifndef FW_DST_MAX
#define FW_DST_MAX (1 << 20)
#endif
#define FW_REFS 8
#define FW_DENY 1
#define FW_ALLOW 2
/* eip_centry.fw: the destination's scope in the low 24 bits (0: none),
 * and two flags, so a destination no rule can touch costs one test. */
#define FW_SCOPE_MASK 16777215 /* 0xffffff */
#define FW_C_GLOBAL (1 << 24) /* global rules exist: look up scope 0 */
#define FW_C_PRIVATE (1 << 25) /* the destination has an allow list */
/* The Bloom filter in front of fw_rules (fw_bloom): 64-bit words (2^21
 * bits), and the distinct source prefix lengths probed (fw_global.lens);
 * a plan with more lengths sets nlens to FW_NO_BLOOM: always look up. */
#define FW_BLOOM_WORDS 32768
#define FW_LENS 7
#define FW_NO_BLOOM 255
/* Firewall verdict cache (fw_vcache): slots per CPU, a power of two (24
 * bytes each: 96 KiB per CPU). */
#ifndef FW_VCACHE_SLOTS
#define FW_VCACHE_SLOTS 4096
#endif

/* Bounds a header offset for the verifier (no real offset reaches 255):
 * offsets read back from memory (a struct pkt passed to a function) carry
 * no bounds of their own. */
#define OFF(x) ((x) & 0xff)

#define ETH_P_IP_ 0x0800
#define ETH_P_ARP_ 0x0806
#define ETH_P_IPV6_ 0x86DD
#define ETH_P_8021Q_ 0x8100
#define ETH_P_8021AD_ 0x88A8
#define ETH_ALEN_ 6
#define ETH_HLEN_ 14
#define MAX_VLAN_DEPTH 2

#define IPPROTO_ICMP_ 1
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_GRE_ 47
/* IPv6 next headers (RFC 8200): extension headers and ICMPv6. */
#define IPPROTO_HOPOPTS_ 0
#define IPPROTO_ROUTING_ 43
#define IPPROTO_FRAGMENT_ 44
#define IPPROTO_AH_ 51 /* walked as an extension header: its length is in 4-byte units (RFC 4302) */
#define IPPROTO_ICMPV6_ 58
#define IPPROTO_DSTOPTS_ 60

#define IP_DF_ 0x4000
#define IP_MF_ 0x2000
#define IP_OFFMASK_ 0x1FFF

#define AF_INET_ 2
#define AF_INET6_ 10

/* TCP flags (byte 13 of the header: struct pkt.tcp_flags). */
#define TCP_FIN_ 0x01
#define TCP_SYN_ 0x02
#define TCP_RST_ 0x04
#define TCP_ACK_ 0x10

/* ARP (RFC 826) for IPv4 over Ethernet: hardware type, address lengths
 * and operations. */
#define ARPHRD_ETHER_ 1
#define ARP_HLEN_ETHER 6
#define ARP_PLEN_IPV4 4
#define ARPOP_REQUEST_ 1
#define ARPOP_REPLY_ 2

/* Neighbor discovery (RFC 4861 4.3, 4.4, 4.6.1): ICMPv6 types, the fixed
 * lengths of a solicitation and of an advertisement with a target
 * link-layer address option, the options' types and the advertisement's
 * flags (the first byte of its reserved word). */
#define ICMP6_NS_ 135
#define ICMP6_NA_ 136
#define NDP_NS_LEN 24
#define NDP_NA_LEN 32
#define NDP_HOP_LIMIT 255
#define NDP_OPT_SLLA 1
#define NDP_OPT_TLLA 2
#define NA_F_ROUTER 0x80
#define NA_F_SOLICITED 0x40
#define NA_F_OVERRIDE 0x20

/* Multiplicative hashing of slots in the per-CPU caches (eip_cache,
 * nh_cache, fw_vcache) and of the firewall's Bloom filter: the 32-bit
 * golden ratio (Knuth) and xxHash's PRIME32_2 and PRIME32_3. */
#define HASH_MUL_GOLDEN 0x9E3779B1u /* 2654435761 */
#define HASH_MUL_XX2 0x85EBCA77u
#define HASH_MUL_XX3 0xC2B2AE3Du

/* NVGRE, RFC 7637: GRE (RFC 2890) with the Key bit set, protocol
 * Transparent Ethernet Bridging, key = VSID (24 bits) << 8 | FlowID. */
#define GRE_FLAG_K 0x2000
#define GRE_PROTO_TEB 0x6558
#define GRE_HLEN_KEY 8
#define VSID_MAX 0xFFFFFF

/* Bytes NVGRE adds to an IPv4 packet: outer IPv4 (20) + GRE with key (8) +
 * inner Ethernet (14). The outer Ethernet header replaces the original. */
#define NVGRE_OVERHEAD 42
/* Full header stack written in front of the inner IP header. */
#define NVGRE_STACK_LEN (ETH_HLEN_ + 20 + GRE_HLEN_KEY + ETH_HLEN_)
/* The same over an IPv6 underlay: outer IPv6 (40) + GRE with key (8) +
 * inner Ethernet (14), 20 bytes more than over IPv4. */
#define NVGRE6_OVERHEAD 62
#define NVGRE6_STACK_LEN (ETH_HLEN_ + 40 + GRE_HLEN_KEY + ETH_HLEN_)

/* Hosts with an IPv6 underlay address (edge: ul6_hosts). Where
 * a map names a host by its IPv4 underlay address (a __be32: eip_route's
 * a[0], eip_centry, eip_prev, drift_flows, lb_backend), an IPv6 host is
 * named by its index i as the address 0.0.0.0/8 + i
 * (UL6_HOST: the first octet 0, never a host's IPv4 underlay address), so
 * the IPv4 entries keep their size and an IPv4 host pays one compare. */
#define UL6_HOSTS_MAX 16384
#define UL6_HOST(h) (((h) & bpf_htonl(0xff000000)) == 0)

#define OUTER_TTL 64
#define ICMP_TTL 64

#define ICMP_ECHOREPLY_ 0
#define ICMP_DEST_UNREACH_ 3
#define ICMP_SOURCE_QUENCH_ 4
#define ICMP_REDIRECT_ 5
#define ICMP_ECHO_ 8
#define ICMP_TIME_EXCEEDED_ 11
#define ICMP_PARAMETERPROB_ 12
#define ICMP_FRAG_NEEDED_ 4
#define ICMP_EXC_TTL_ 0

/* config flags */
#define CFG_F_ICMP_TTL 0x1 /* answer expired TTLs with ICMP time exceeded */

/* Agent flow table (agent_flows): one entry per flow that came in through
 * a VIP (and per EIP flow that replaced one). The loader may resize it. */
#ifndef AGENT_FLOW_MAX
#define AGENT_FLOW_MAX (1 << 20)
#endif
/* The IPv6 flow table (agent_flows6): flows through an IPv6 VIP (and IPv6
 * EIP flows that replaced one), with 16-byte addresses (76-byte entries
 * against agent_flows' 36): a quarter of AGENT_FLOW_MAX, and a quarter of
 * what the loader gives agent_flows. */
#ifndef AGENT_FLOW6_MAX
#define AGENT_FLOW6_MAX (1 << 18)
#endif

/* agent_eip.flags, agent_guest.flags: the guest is an encap-mode service
 * backend as well, so its replies are looked up in agent_flows (an IPv4
 * EIP's guest behind an IPv4 VIP) or agent_flows6 (an IPv6 EIP's guest
 * behind an IPv6 VIP). */
#define AGENT_F_SVC 0x1
/* agent_guest.flags: the guest's EIP has a bandwidth limit (eip_bw, lib/bw.h). */
#define AGENT_F_BW 0x2

/* Health checks through the tunnel: marks (backends checked) per edge,
 * guests per host (lib/hc.h, lib/agenthc.h). */
#define HC_MARKS_MAX 65536
/* hc_peers: a backend guest may be checked at its IPv4 and its IPv6
 * address (an IPv4 and an IPv6 VIP's pools). */
#define HC_PEERS_MAX 131072 /* twice HC_MARKS_MAX */
#define AGENT_HC_GUEST_MAX 65536

#endif
