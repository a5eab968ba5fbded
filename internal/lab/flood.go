package lab

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/netns"
)

// Flood kinds.
const (
	FloodSYN = "syn" // TCP SYNs, a new source port each
	FloodUDP = "udp" // UDP datagrams, a new source port each
)

// FloodSpec is a bounded flood from a lab node.
type FloodSpec struct {
	Kind     string     // FloodSYN or FloodUDP
	Dst      netip.Addr // the target
	Port     uint16     // destination port
	PPS      int        // packets per second (paced in 1 ms slices)
	Duration time.Duration
	Payload  int // UDP payload bytes
}

// FloodStats says what a flood sent.
type FloodStats struct {
	Sent    uint64
	Errors  uint64
	Started time.Time
	Ended   time.Time
}

// Flood sends spec's packets from node (the attacker, AttackerNode)
// through a raw socket opened in its namespace, with the node's own
// source address and a fresh source port per packet (so the router's
// ECMP spreads it over every edge of the set), until spec.Duration has
// passed or ctx ends. The lab is sealed: the packets can reach the lab's
// addresses only.
func (l *Lab) Flood(ctx context.Context, node string, spec FloodSpec) (FloodStats, error) {
	n := l.Topo.Node(node)
	if n == nil {
		return FloodStats{}, fmt.Errorf("no lab node %q", node)
	}
	if spec.Kind != FloodSYN && spec.Kind != FloodUDP || !spec.Dst.Is4() || spec.PPS <= 0 || spec.Duration <= 0 {
		return FloodStats{}, fmt.Errorf("flood %+v: want kind syn or udp, an IPv4 target, a rate and a duration", spec)
	}
	src, err := netip.ParsePrefix(n.Addresses["eth0"])
	if err != nil {
		return FloodStats{}, fmt.Errorf("flood from %s: its eth0 address: %w", node, err)
	}
	var fd int
	if err := netns.Do(n.Netns, func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		return err
	}); err != nil {
		return FloodStats{}, fmt.Errorf("flood from %s: raw socket: %w", node, err)
	}
	defer syscall.Close(fd)
	to := &syscall.SockaddrInet4{Addr: spec.Dst.As4()}
	pkt := floodPacket(spec, src.Addr())
	st := FloodStats{Started: time.Now()}
	perMS := float64(spec.PPS) / 1000
	var owed float64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	end := st.Started.Add(spec.Duration)
	last := st.Started
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			st.Ended = time.Now()
			return st, ctx.Err()
		case now = <-t.C:
		}
		if now.After(end) {
			break
		}
		// Pace by elapsed time: a late tick sends what it owes, but no
		// more than 10 ms worth (a machine that cannot keep up gets a
		// lower rate, not bursts that run past the end).
		owed = min(owed+perMS*float64(now.Sub(last))/float64(time.Millisecond), 10*perMS+1)
		last = now
		for ; owed >= 1; owed-- {
			sport := uint16(1024 + rand.IntN(64511))
			setSourcePort(pkt, spec.Kind, sport)
			if err := syscall.Sendto(fd, pkt, 0, to); err != nil {
				st.Errors++
			} else {
				st.Sent++
			}
		}
	}
	st.Ended = time.Now()
	return st, nil
}

// floodPacket builds the IPv4 packet (the kernel fills the IP checksum,
// and the ID when 0: IPPROTO_RAW implies IP_HDRINCL).
func floodPacket(spec FloodSpec, src netip.Addr) []byte {
	l4 := 20
	if spec.Kind == FloodUDP {
		l4 = 8 + spec.Payload
	}
	b := make([]byte, 20+l4)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	b[8] = 64
	s, d := src.As4(), spec.Dst.As4()
	copy(b[12:16], s[:])
	copy(b[16:20], d[:])
	if spec.Kind == FloodSYN {
		b[9] = syscall.IPPROTO_TCP
		binary.BigEndian.PutUint16(b[22:], spec.Port)
		binary.BigEndian.PutUint32(b[24:], rand.Uint32()) // seq
		b[32] = 5 << 4                                    // data offset
		b[33] = 0x02                                      // SYN
		binary.BigEndian.PutUint16(b[34:], 64240)         // window
	} else {
		b[9] = syscall.IPPROTO_UDP
		binary.BigEndian.PutUint16(b[22:], spec.Port)
		binary.BigEndian.PutUint16(b[24:], uint16(l4))
	}
	return b
}

// setSourcePort writes the source port and the L4 checksum.
func setSourcePort(b []byte, kind string, sport uint16) {
	binary.BigEndian.PutUint16(b[20:], sport)
	ck := 36 // TCP checksum offset
	if kind == FloodUDP {
		ck = 26
	}
	b[ck], b[ck+1] = 0, 0
	// Pseudo-header: addresses, protocol, L4 length.
	sum := uint32(0)
	for i := 12; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	sum += uint32(b[9]) + uint32(len(b)-20)
	l4 := b[20:]
	for i := 0; i+1 < len(l4); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(l4[i:]))
	}
	if len(l4)%2 == 1 {
		sum += uint32(l4[len(l4)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 && kind == FloodUDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b[ck:], c)
}
