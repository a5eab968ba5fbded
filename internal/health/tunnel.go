package health

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// Tunnel is how a probe reaches an encap-mode backend: the way its clients
// do, in NVGRE through the backend's host and its agent (issue 7, section
// 4; docs/services.md, "Health checks"). The probe's socket is bound to
// the edge's health-check address (Source), which a policy rule routes to
// the health-check device, and carries Mark (SO_MARK), by which the
// device's tc program (bpf/lib/hc.h) finds the host, VSID and guest to
// encapsulate it to. The answer comes back to Source through the edge's
// XDP program; two guests with one private address are told apart by
// their sockets' 4-tuples.
type Tunnel struct {
	Host   netip.Addr // the backend host's underlay address
	VSID   uint32     // the guest's VSID
	Mark   uint32     // the socket's SO_MARK (set by the edge)
	Source netip.Addr // the edge's health-check address (set by the edge)
	// Guest6: an IPv6 VIP's backend, the guest's IPv6 address, which an
	// edge with an IPv6 health-check address checks (the edge then sets
	// Source to that address and the target's Addr to this one).
	Guest6 netip.Addr
}

func sameTunnel(a, b *Tunnel) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// dial opens a probe's connection: through the tunnel when t has one
// (bound to its source, with its mark), else directly.
func (t Target) dial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	if tu := t.Tunnel; tu != nil && tu.Source.IsValid() {
		switch network {
		case "tcp", "tcp4", "tcp6":
			d.LocalAddr = &net.TCPAddr{IP: tu.Source.AsSlice()}
		case "udp", "udp4", "udp6":
			d.LocalAddr = &net.UDPAddr{IP: tu.Source.AsSlice()}
		default:
			return nil, fmt.Errorf("health check of %s through the tunnel: network %s not supported", t.id(), network)
		}
		mark := int(tu.Mark)
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, mark)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("SO_MARK %#x: %w", mark, serr)
			}
			return nil
		}
	}
	return d.DialContext(ctx, network, address)
}
