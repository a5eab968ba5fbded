/* ports.h: the ports word. struct pkt.ports, and every __be32 of two ports
 * in these programs, is the first four bytes of a TCP or UDP header loaded
 * as one word; the objects are built for little-endian BPF only (bpfel), so
 * the source port, in network order, is the word's low half and the
 * destination port its high half. */
#ifndef AZG_PORTS_H
#define AZG_PORTS_H

#include <linux/types.h>

static __always_inline __be16 ports_sport(__be32 ports)
{
	return (__be16)(ports & 0xffff);
}

static __always_inline __be16 ports_dport(__be32 ports)
{
	return (__be16)(ports >> 16);
}

/* The ports word of sport and dport (network order). */
static __always_inline __be32 ports_of(__be16 sport, __be16 dport)
{
	return (__u32)sport | ((__u32)dport << 16);
}

/* ports with its source port replaced by sport. */
static __always_inline __be32 ports_with_sport(__be32 ports, __be16 sport)
{
	return (ports & 0xffff0000) | sport;
}

#endif
