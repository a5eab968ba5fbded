package netlab

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netns"
)

// ARPEvent is one ARP frame an ARPProbe saw.
type ARPEvent struct {
	At       time.Time
	Op       uint16 // 1 request, 2 reply
	Dst, SHA net.HardwareAddr
	SPA, TPA netip.Addr
}

// ARPProbe sends ARP requests from an interface of a namespace and
// records every ARP frame seen there (tests of ARP answering). Request n
// asks from the sender address SeqAddr(n), which an answer carries back
// as its target: each answer belongs to exactly one request, so two
// answers to one request show.
type ARPProbe struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
	mu      sync.Mutex
	events  []ARPEvent
	sent    map[netip.Addr]bool
}

// SeqAddr is the sender address of request n (from 198.18.0.0/15).
func SeqAddr(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}) }

// OpenARPProbe opens a packet socket on dev in namespace ns.
func OpenARPProbe(ns, dev string) (*ARPProbe, error) {
	c := &ARPProbe{sent: map[netip.Addr]bool{}, fd: -1}
	err := netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		c.ifindex, c.mac = ifc.Index, ifc.HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return err
		}
		c.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index})
	})
	if err != nil {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
		return nil, err
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(c.fd)
		return nil, err
	}
	return c, nil
}

// Close closes the socket (after the context given to Run ended).
func (c *ARPProbe) Close() error { return unix.Close(c.fd) }

// Request broadcasts request n for target.
func (c *ARPProbe) Request(target netip.Addr, n int) error {
	f := make([]byte, 42)
	copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], c.mac)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_ARP)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], 0x0800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1)
	copy(a[8:14], c.mac)
	spa := SeqAddr(n).As4()
	copy(a[14:18], spa[:])
	tpa := target.As4()
	copy(a[24:28], tpa[:])
	c.mu.Lock()
	c.sent[SeqAddr(n)] = true
	c.mu.Unlock()
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: c.ifindex, Halen: 6}
	copy(sa.Addr[:], f[0:6])
	return unix.Sendto(c.fd, f, 0, sa)
}

// Run records frames until ctx ends.
func (c *ARPProbe) Run(ctx context.Context) {
	buf := make([]byte, 1500)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil || n < 42 {
			continue
		}
		a := buf[14:42]
		if binary.BigEndian.Uint16(a[2:]) != 0x0800 {
			continue
		}
		e := ARPEvent{At: time.Now(), Op: binary.BigEndian.Uint16(a[6:]),
			Dst: net.HardwareAddr(append([]byte(nil), buf[0:6]...)), SHA: net.HardwareAddr(append([]byte(nil), a[8:14]...)),
			SPA: netip.AddrFrom4([4]byte(a[14:18])), TPA: netip.AddrFrom4([4]byte(a[24:28]))}
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
	}
}

// Seen is how many ARP frames were recorded.
func (c *ARPProbe) Seen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

// Answers returns the replies to this probe's requests, in order.
func (c *ARPProbe) Answers() []ARPEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ARPEvent
	for _, e := range c.events {
		if c.sent[e.TPA] && e.Op == 2 {
			out = append(out, e)
		}
	}
	return out
}

// Gratuitous returns the gratuitous ARPs seen (broadcast, sender address
// = target address).
func (c *ARPProbe) Gratuitous() []ARPEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ARPEvent
	for _, e := range c.events {
		if e.SPA == e.TPA && e.Dst.String() == "ff:ff:ff:ff:ff:ff" {
			out = append(out, e)
		}
	}
	return out
}

// DoubleAnswers lists the requests answered more than once, with who
// answered.
func (c *ARPProbe) DoubleAnswers() map[netip.Addr][]string {
	per := map[netip.Addr][]string{}
	for _, e := range c.Answers() {
		per[e.TPA] = append(per[e.TPA], e.SHA.String())
	}
	out := map[netip.Addr][]string{}
	for a, by := range per {
		if len(by) > 1 {
			out[a] = by
		}
	}
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
