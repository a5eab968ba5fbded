package lab

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/azgate/azgate/internal/netns"
)

// A UDP load from the Internet client to EIPs, measured at the receivers
// (the guests): the shared-bandwidth test's and the demo's traffic. The
// sender paces each target to a rate (bits/s of IP bytes, as the data
// plane's buckets count them); the receiver in the guest counts what
// arrives in 100 ms bins, so any window can be read afterwards, aligned
// with what the test did meanwhile (a manager killed, say).

// LoadPort is the UDP port the load's receivers listen on in the guests
// (the lab server's echo is 7000; this one only counts).
const LoadPort = 9000

// LoadPayload is the UDP payload of each datagram: with the IP and UDP
// headers a 1,428-byte packet, inside the guests' MTU of 1,458.
const LoadPayload = 1400

// loadIPBytes is a datagram's size as the data plane counts it (IP
// header, UDP header, payload).
const loadIPBytes = LoadPayload + 28

const loadBin = 100 * time.Millisecond

// LoadTarget is one EIP the load sends to, and the guest it is bound to.
type LoadTarget struct {
	EIP   string // address
	Guest string // lab node of the guest behind it (receiver)
	Rate  uint64 // offered bits/s of IP bytes
	Flows int    // UDP flows (source ports); 0: 8
}

// Load is a running UDP load.
type Load struct {
	start   time.Time
	targets []*loadTarget
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type loadTarget struct {
	LoadTarget
	rate  atomic.Uint64
	flows []*net.UDPConn
	rx    *net.UDPConn
	mu    sync.Mutex
	bins  []uint64        // received IP bytes per loadBin since start (kernel receive time)
	stall []time.Duration // the sender's stalls beyond 20 ms per loadBin (see send)
	sent  atomic.Uint64
}

// LoadRcvBuf is each receiver's socket buffer: 8 MB holds about 0.6 s of
// 100 Mbit/s, so a receiver not scheduled for a while loses nothing.
const LoadRcvBuf = 8 << 20

// StartLoad opens a receiver in each target's guest and the flows from
// the Internet client, and starts sending.
func (l *Lab) StartLoad(targets []LoadTarget) (*Load, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &Load{cancel: cancel}
	inet := l.Topo.Node("inet").Netns
	for _, t := range targets {
		g := l.Topo.Node(t.Guest)
		if g == nil || g.Role != "guest" {
			ld.Stop()
			return nil, fmt.Errorf("lab: load to %s: %q is not a guest", t.EIP, t.Guest)
		}
		// An address net.ParseIP refuses would dial nil: inet's own
		// loopback, a load that never crosses the gateway.
		ip := net.ParseIP(t.EIP).To4()
		if ip == nil || ip.IsUnspecified() || ip.IsLoopback() {
			ld.Stop()
			return nil, fmt.Errorf("lab: load target EIP %q: want an IPv4 address", t.EIP)
		}
		if t.Flows < 0 {
			ld.Stop()
			return nil, fmt.Errorf("lab: load to %s: %d flows", t.EIP, t.Flows) // send would divide by none
		}
		if t.Flows == 0 {
			t.Flows = 8
		}
		lt := &loadTarget{LoadTarget: t}
		lt.rate.Store(t.Rate)
		ld.targets = append(ld.targets, lt)
		err := netns.Do(g.Netns, func() error {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: LoadPort})
			if err != nil {
				return err
			}
			lt.rx = c
			if err := setRcvBuf(c, LoadRcvBuf); err != nil {
				return err
			}
			return setRxTimestamps(c)
		})
		if err != nil {
			ld.Stop()
			return nil, fmt.Errorf("lab: load receiver in %s: %w", t.Guest, err)
		}
		ua := &net.UDPAddr{IP: ip, Port: LoadPort}
		for i := 0; i < t.Flows; i++ {
			err := netns.Do(inet, func() error {
				c, err := net.DialUDP("udp4", nil, ua)
				if err == nil {
					lt.flows = append(lt.flows, c)
				}
				return err
			})
			if err != nil {
				ld.Stop()
				return nil, fmt.Errorf("lab: load flow to %s: %w", t.EIP, err)
			}
		}
	}
	ld.start = time.Now()
	for _, lt := range ld.targets {
		ld.wg.Add(2)
		go ld.receive(lt)
		go ld.send(ctx, lt)
	}
	return ld, nil
}

// receive counts each datagram in the bin of its kernel receive time
// (SO_TIMESTAMPNS), not of the read: a receiver not scheduled for a while
// reads late, but counts in the right window.
func (ld *Load) receive(lt *loadTarget) {
	defer ld.wg.Done()
	buf := make([]byte, 2048)
	oob := make([]byte, 128)
	for {
		n, oobn, _, _, err := lt.rx.ReadMsgUDP(buf, oob)
		if err != nil {
			return // closed
		}
		at, ok := rxTimestamp(oob[:oobn])
		if !ok {
			at = time.Now()
		}
		i := int(at.Sub(ld.start) / loadBin)
		if i < 0 {
			continue // sent before the start: not ours
		}
		lt.mu.Lock()
		for len(lt.bins) <= i {
			lt.bins = append(lt.bins, 0)
		}
		lt.bins[i] += uint64(n + 28)
		lt.mu.Unlock()
	}
}

// send paces the target's flows (round robin) to its rate: every
// millisecond it sends what the rate allows since the start of the
// current rate, catching up at most 20 ms behind (a sender not scheduled
// for longer skips, rather than bursting, what it missed).
func (ld *Load) send(ctx context.Context, lt *loadTarget) {
	defer ld.wg.Done()
	payload := make([]byte, LoadPayload)
	var credit float64 // bytes allowed and not yet sent
	last := time.Now()
	k := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		rate := float64(lt.rate.Load()) / 8
		credit += rate * now.Sub(last).Seconds()
		// A tick late by more than the edges' default burst (20 ms) is
		// the sender not scheduled for longer than a bucket can make up
		// for: that excess is counted (Stalled), so a window the load
		// itself under-offered is told apart from one the gateway cut.
		if late := now.Sub(last) - 20*time.Millisecond; late > 0 {
			i := int(now.Sub(ld.start) / loadBin)
			lt.mu.Lock()
			for len(lt.stall) <= i {
				lt.stall = append(lt.stall, 0)
			}
			lt.stall[i] += late
			lt.mu.Unlock()
		}
		last = now
		if max := rate * 0.02; credit > max {
			credit = max
		}
		for credit >= loadIPBytes {
			if _, err := lt.flows[k%len(lt.flows)].Write(payload); err == nil {
				lt.sent.Add(loadIPBytes)
			}
			k++
			credit -= loadIPBytes
		}
	}
}

// SetRate changes the offered rate of the target sending to eip.
func (ld *Load) SetRate(eip string, rate uint64) error {
	for _, lt := range ld.targets {
		if lt.EIP == eip {
			lt.rate.Store(rate)
			return nil
		}
	}
	return fmt.Errorf("lab: load has no target %s", eip)
}

// Received is the rate (bits/s of IP bytes) each target's receiver got
// in [from, to), by EIP; the window is rounded to the 100 ms bins.
func (ld *Load) Received(from, to time.Time) map[string]float64 {
	out := map[string]float64{}
	a, b := int(from.Sub(ld.start)/loadBin), int(to.Sub(ld.start)/loadBin)
	if a < 0 {
		a = 0
	}
	if b <= a {
		return out
	}
	secs := float64(b-a) * loadBin.Seconds()
	for _, lt := range ld.targets {
		lt.mu.Lock()
		var sum uint64
		for i := a; i < b && i < len(lt.bins); i++ {
			sum += lt.bins[i]
		}
		lt.mu.Unlock()
		out[lt.EIP] = float64(sum) * 8 / secs
	}
	return out
}

// Stalled is, for the target whose sender stalled most in [from, to)
// (rounded to the bins), how long it was not scheduled beyond 20 ms at a
// time, summed: while it stalls it offers nothing, and the edges'
// buckets keep only their burst (20 ms by default) for when it resumes,
// so that much of the window is lost to the lab, not to the gateway.
func (ld *Load) Stalled(from, to time.Time) time.Duration {
	a, b := int(from.Sub(ld.start)/loadBin), int(to.Sub(ld.start)/loadBin)
	var worst time.Duration
	for _, lt := range ld.targets {
		lt.mu.Lock()
		var sum time.Duration
		for i := max(a, 0); i < b && i < len(lt.stall); i++ {
			sum += lt.stall[i]
		}
		lt.mu.Unlock()
		worst = max(worst, sum)
	}
	return worst
}

// Start is when the load started sending.
func (ld *Load) Start() time.Time { return ld.start }

// Windows are the received rates in consecutive windows of width from
// from to to (the last partial window left out; none for a width under a
// bin).
func (ld *Load) Windows(from, to time.Time, width time.Duration) []LoadWindow {
	var out []LoadWindow
	if width < loadBin {
		return nil
	}
	for t := from; !t.Add(width).After(to); t = t.Add(width) {
		r := ld.Received(t, t.Add(width))
		w := LoadWindow{Start: t, Rates: r}
		for _, v := range r {
			w.Total += v
		}
		out = append(out, w)
	}
	return out
}

// LoadWindow is what the receivers got in one window.
type LoadWindow struct {
	Start time.Time
	Rates map[string]float64 // bits/s by EIP
	Total float64
}

// Sent is the bytes sent to each EIP so far (IP bytes).
func (ld *Load) Sent() map[string]uint64 {
	out := map[string]uint64{}
	for _, lt := range ld.targets {
		out[lt.EIP] = lt.sent.Load()
	}
	return out
}

// Stop ends the senders and the receivers and closes their sockets.
func (ld *Load) Stop() {
	ld.cancel()
	for _, lt := range ld.targets {
		for _, c := range lt.flows {
			c.Close()
		}
		if lt.rx != nil {
			lt.rx.Close() // ends receive
		}
	}
	ld.wg.Wait()
}

func setRxTimestamps(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// rxTimestamp finds the SO_TIMESTAMPNS control message (a timespec of
// CLOCK_REALTIME).
func rxTimestamp(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Sec, ts.Nsec), true
		}
	}
	return time.Time{}, false
}
