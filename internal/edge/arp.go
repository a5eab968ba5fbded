package edge

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane"
)

// arpAnswerer makes the data plane answer ARP for VIPs on interfaces the
// clients share with the edge (the DMZ case), and announces every VIP
// there with a gratuitous ARP when this edge starts serving it, so a
// takeover from another node is seen at once.
type arpAnswerer struct {
	ifaces    []*net.Interface
	log       *slog.Logger
	mu        sync.Mutex
	announced map[netip.Addr]bool
}

func newARP(dp *dataplane.Edge, names []string, log *slog.Logger) (*arpAnswerer, error) {
	a := &arpAnswerer{log: log, announced: map[netip.Addr]bool{}}
	for _, n := range names {
		ifc, err := net.InterfaceByName(n)
		if err != nil {
			return nil, fmt.Errorf("--arp-iface %s: %w", n, err)
		}
		if err := dp.SetARP(ifc.Index, ifc.HardwareAddr); err != nil {
			return nil, fmt.Errorf("--arp-iface %s: %w", n, err)
		}
		a.ifaces = append(a.ifaces, ifc)
	}
	return a, nil
}

// announce sends a gratuitous ARP for each VIP not announced yet.
func (a *arpAnswerer) announce(vips []netip.Addr) {
	if len(a.ifaces) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	want := map[netip.Addr]bool{}
	for _, v := range vips {
		want[v] = true
		if a.announced[v] || !v.Is4() {
			continue
		}
		for _, ifc := range a.ifaces {
			if err := gratuitousARP(ifc, v); err != nil {
				a.log.Warn("gratuitous ARP failed", "vip", v, "iface", ifc.Name, "err", err)
			}
		}
		a.announced[v] = true
	}
	for v := range a.announced {
		if !want[v] {
			delete(a.announced, v)
		}
	}
}

// gratuitousARP broadcasts an ARP reply for ip from the interface's MAC
// (RFC 5227 section 3 announcement form).
func gratuitousARP(ifc *net.Interface, ip netip.Addr) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	frame := make([]byte, 42)
	copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:12], ifc.HardwareAddr)
	binary.BigEndian.PutUint16(frame[12:], unix.ETH_P_ARP)
	a := frame[14:]
	binary.BigEndian.PutUint16(a[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 2) // reply
	copy(a[8:14], ifc.HardwareAddr)
	b := ip.As4()
	copy(a[14:18], b[:])
	copy(a[18:24], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(a[24:28], b[:])
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifc.Index, Halen: 6}
	copy(sa.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	return unix.Sendto(fd, frame, 0, sa)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
