package agent

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/dataplane/dptest"
)

// liveWire sends frames as the guest (into the bed's "vm" end of the
// guest link) and reads what the host tunnels out of its underlay (at the
// "fab" end, the underlay router's side), both in the bed's peer
// namespace, with packet sockets that exist only there and for the test.
type liveWire struct {
	tx, rx int // AF_PACKET sockets on vm and fab
	vm     int // ifindex of vm
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newLiveWire(env *dptest.Env) (*liveWire, error) {
	w := &liveWire{tx: -1, rx: -1}
	// A frame redirected into a veth is dropped unless the receiving end
	// has XDP or GRO (docs: NOTES-machine): GRO on the router's end.
	if out, err := env.Peer.Cmd("ethtool", "-K", "fab", "gro", "on").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ethtool -K fab gro on: %v: %s", err, out)
	}
	err := env.Peer.Do(func() error {
		vm, err := net.InterfaceByName("vm")
		if err != nil {
			return err
		}
		fab, err := net.InterfaceByName("fab")
		if err != nil {
			return err
		}
		w.vm = vm.Index
		if w.tx, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
			return err
		}
		if w.rx, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP))); err != nil {
			return err
		}
		if err := unix.Bind(w.rx, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: fab.Index}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		return unix.SetsockoptTimeval(w.rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	if err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

func (w *liveWire) Close() {
	for _, fd := range []int{w.tx, w.rx} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// send sends one guest frame and returns the outer destinations of the
// NVGRE packets from the host that arrive within the receive timeout
// (one, when the agent tunnels it).
func (w *liveWire) send(t *testing.T, frame []byte) []string {
	t.Helper()
	if err := unix.Sendto(w.tx, frame, 0, &unix.SockaddrLinklayer{Ifindex: w.vm, Halen: 6, Addr: [8]byte{2, 0xcc, 0, 0, 0, 1}}); err != nil {
		t.Fatalf("send as the guest: %v", err)
	}
	var out []string
	buf := make([]byte, 2048)
	for {
		n, _, err := unix.Recvfrom(w.rx, buf, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				break
			}
			t.Fatalf("read the underlay: %v", err)
		}
		// Ethernet, then outer IPv4 (no options from the agent) with GRE
		// from the host's underlay address.
		if n < 14+20+8 || binary.BigEndian.Uint16(buf[12:14]) != unix.ETH_P_IP || buf[14+9] != 47 {
			continue
		}
		src := net.IP(buf[14+12 : 14+16]).String()
		if src != dptest.UlAddr {
			continue
		}
		out = append(out, net.IP(buf[14+16:14+20]).String())
		if len(out) == 1 {
			// The one tunnelled packet arrived: wait no longer.
			break
		}
	}
	if len(out) == 0 {
		t.Fatalf("the guest's frame did not come out of the host's underlay")
	}
	return out
}
