package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/azgate/azgate/internal/netns"
)

// Long-lived traffic for failover measurements: many TCP connections to
// the servers' line echo (each its own source port, so the router's ECMP
// spreads them over the edges) and UDP probe flows whose every datagram
// carries its send time, so a hole in a flow's replies measures the
// traffic gap without the receiver's scheduling noise.

// Conns are long-lived TCP connections from the Internet node, each
// sending a line every interval and expecting it back.
type Conns struct {
	mu      sync.Mutex
	conns   []*echoConn
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped bool
}

type echoConn struct {
	target string
	c      net.Conn
	name   string // the server that answered
	err    error
	died   time.Time
	echoes int
}

// ConnsLost is what happened to the connections of a target.
type ConnsLost struct {
	Target string   `json:"target"`
	Open   int      `json:"open"`
	Lost   int      `json:"lost"`
	Errors []string `json:"errors,omitempty"`
}

// OpenConns opens perTarget connections to each target (ADDR:PORT of a
// line echo: the lab servers' port 7000), 32 dials at a time, and starts
// each sending a line every interval (phases spread over the interval).
func (l *Lab) OpenConns(ctx context.Context, targets []string, perTarget int, interval time.Duration) (*Conns, error) {
	dial := Dialer(l.Topo.Node("inet").Netns)
	cctx, cancel := context.WithCancel(context.Background())
	cs := &Conns{cancel: cancel}
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for _, t := range targets {
		for i := 0; i < perTarget; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
				defer dcancel()
				c, err := dial(dctx, "tcp", t) // either family: the target's
				if err == nil {
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					var name string
					name, err = bufio.NewReader(c).ReadString('\n')
					if err == nil {
						mu.Lock()
						cs.conns = append(cs.conns, &echoConn{target: t, c: c, name: name[:len(name)-1]})
						mu.Unlock()
						return
					}
					c.Close()
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("connect to %s: %w", t, err)
				}
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if firstErr != nil {
		cs.Close()
		cancel()
		return nil, firstErr
	}
	for i, ec := range cs.conns {
		cs.wg.Add(1)
		phase := time.Duration(i) * interval / time.Duration(len(cs.conns))
		go cs.run(cctx, ec, interval, phase)
	}
	return cs, nil
}

// run echoes a line every interval; a connection that errs or does not
// answer within 15 s is lost (TCP retransmits far longer, but a gap that
// long is a failure by any measure).
func (cs *Conns) run(ctx context.Context, ec *echoConn, interval, phase time.Duration) {
	defer cs.wg.Done()
	rd := bufio.NewReader(ec.c)
	select {
	case <-ctx.Done():
		return
	case <-time.After(phase):
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for seq := 0; ; seq++ {
		line := strconv.Itoa(seq)
		ec.c.SetDeadline(time.Now().Add(15 * time.Second))
		_, err := fmt.Fprintf(ec.c, "%s\n", line)
		var got string
		if err == nil {
			got, err = rd.ReadString('\n')
			if err == nil && got != line+"\n" {
				err = fmt.Errorf("echo %q, want %q", got, line)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			cs.mu.Lock()
			ec.err, ec.died = err, time.Now()
			cs.mu.Unlock()
			return
		}
		cs.mu.Lock()
		ec.echoes++
		cs.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Lost counts, by target, the connections that failed since a time.
func (cs *Conns) Lost(since time.Time) []ConnsLost {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	by := map[string]*ConnsLost{}
	var order []string
	for _, ec := range cs.conns {
		cl := by[ec.target]
		if cl == nil {
			cl = &ConnsLost{Target: ec.target}
			by[ec.target] = cl
			order = append(order, ec.target)
		}
		cl.Open++
		if ec.err != nil && !ec.died.Before(since) {
			cl.Lost++
			if len(cl.Errors) < 5 {
				cl.Errors = append(cl.Errors, ec.err.Error())
			}
		}
	}
	sort.Strings(order)
	var out []ConnsLost
	for _, t := range order {
		out = append(out, *by[t])
	}
	return out
}

// Len is how many connections are open (or were, before they failed).
func (cs *Conns) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.conns)
}

// Alive counts the connections that have not failed.
func (cs *Conns) Alive() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for _, ec := range cs.conns {
		if ec.err == nil {
			n++
		}
	}
	return n
}

// Close stops and closes every connection.
func (cs *Conns) Close() {
	cs.mu.Lock()
	if cs.stopped {
		cs.mu.Unlock()
		return
	}
	cs.stopped = true
	cs.mu.Unlock()
	if cs.cancel != nil {
		cs.cancel()
	}
	for _, ec := range cs.conns {
		ec.c.Close()
	}
	cs.wg.Wait()
}

// Probes are UDP flows from the Internet node to a datagram echo (the lab
// servers' UDP port 7000), each sending a numbered, time-stamped datagram
// every interval.
type Probes struct {
	interval time.Duration
	flows    []*probeFlow
	cancel   context.CancelFunc
	send, rx sync.WaitGroup
	// rounds[seq] is when round seq was sent (rounds[0]: the start), so
	// that a hole's gap counts only the time the flow was probed: a
	// sender starved by a loaded machine (250 ms seen in a run) must not
	// pass for the gateway's outage.
	mu     sync.Mutex
	rounds []time.Time
}

// probedGap is the time from round a to round b during which the flows
// were probed: each step between two rounds counts at most four
// intervals (late ticks on a busy machine), never a sender's stall.
func (p *Probes) probedGap(a, b uint64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var g time.Duration
	for i := a; i < b && int(i+1) < len(p.rounds); i++ {
		g += min(p.rounds[i+1].Sub(p.rounds[i]), 4*p.interval)
	}
	return g
}

type probeFlow struct {
	target string
	c      *net.UDPConn
	mu     sync.Mutex
	sent   uint64
	recv   uint64
	// lastSeq and lastSent: the newest reply's sequence number and send
	// time; gap is the longest stretch of send times with no reply.
	lastSeq  uint64
	lastSent time.Time
	gap      time.Duration
	holes    int
	// firstLoss, lastLoss: send times of the first and the last datagram
	// lost in a hole (approximately: the one after the last answered).
	firstLoss, lastLoss time.Time
	// servers: who answered (the "NAME: " of the replies).
	servers map[string]*ServerAnswers
}

// ProbeStats is what the flows to one target saw.
type ProbeStats struct {
	Target   string `json:"target"`
	Flows    int    `json:"flows"`
	Interval string `json:"interval"`
	Sent     uint64 `json:"sent"`
	Lost     uint64 `json:"lost"`
	// Gap is the longest time, over the flows, between the send times of
	// two datagrams answered with every datagram between them lost: how
	// long the path of that flow was broken (to within one interval).
	// Only probed time counts: a step between two sending rounds counts
	// at most four intervals, so a sender the machine starved does not
	// stretch a one-datagram loss into a long "gap".
	Gap time.Duration `json:"gap_ns"`
	// FlowsHit counts the flows that lost at least one datagram;
	// Unrecovered those whose replies had stopped for good (none in the
	// last second): their outage is not in Gap.
	FlowsHit    int `json:"flows_hit"`
	Unrecovered int `json:"unrecovered"`
	// FirstLoss and LastLoss bound the send times of the datagrams lost
	// in holes, over the flows (zero: none), to place the loss in time.
	FirstLoss time.Time `json:"first_loss,omitzero"`
	LastLoss  time.Time `json:"last_loss,omitzero"`
	// Servers: what each server (the name its replies begin with)
	// answered: an EIP that drifts is answered by its old guest, then
	// by its new one.
	Servers map[string]ServerAnswers `json:"servers,omitempty"`
}

// ServerAnswers is what one server answered of a target's probes.
type ServerAnswers struct {
	Replies uint64 `json:"replies"`
	// First and Last: the send times of the first and the last datagram
	// it answered.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

// ProbeRcvBuf is the receive buffer of each probe flow's socket.
const ProbeRcvBuf = 1 << 20

// StartProbes opens flows UDP flows to each target (ADDR:PORT) and starts
// sending.
func (l *Lab) StartProbes(targets []string, flows int, interval time.Duration) (*Probes, error) {
	ns := l.Topo.Node("inet").Netns
	return startProbes(func(ua *net.UDPAddr) (*net.UDPConn, error) {
		var c *net.UDPConn
		err := netns.Do(ns, func() error {
			var err error
			if c, err = net.DialUDP("udp", nil, ua); err != nil { // the target's family
				return err
			}
			// Replies come back 100 a second per flow: the default
			// buffer holds about half a second of them (listenEchoUDP);
			// a prober starved longer must not count its own drops as
			// the gateway's.
			if err = setRcvBuf(c, ProbeRcvBuf); err != nil {
				c.Close()
			}
			return err
		})
		return c, err
	}, targets, flows, interval)
}

// startProbes opens the flows with dial (a socket per flow: its own
// source port) and starts sending.
func startProbes(dial func(*net.UDPAddr) (*net.UDPConn, error), targets []string, flows int, interval time.Duration) (*Probes, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Probes{interval: interval, cancel: cancel, rounds: []time.Time{time.Now()}}
	for _, t := range targets {
		ua, err := net.ResolveUDPAddr("udp", t)
		if err != nil {
			cancel()
			return nil, err
		}
		for i := 0; i < flows; i++ {
			c, err := dial(ua)
			if err != nil {
				p.closeAll()
				cancel()
				return nil, fmt.Errorf("probe flow to %s: %w", t, err)
			}
			// Sequence numbers start at 1: a first reply numbered
			// higher is a hole from the start.
			p.flows = append(p.flows, &probeFlow{target: t, c: c, lastSent: time.Now(), servers: map[string]*ServerAnswers{}})
		}
	}
	for _, f := range p.flows {
		p.rx.Add(1)
		go p.receive(f)
	}
	p.send.Add(1)
	go p.sender(ctx)
	return p, nil
}

func (p *Probes) closeAll() {
	for _, f := range p.flows {
		f.c.Close()
	}
}

func (p *Probes) sender(ctx context.Context) {
	defer p.send.Done()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	buf := make([]byte, 16)
	for seq := uint64(1); ; seq++ {
		now := time.Now()
		p.mu.Lock()
		p.rounds = append(p.rounds, now)
		p.mu.Unlock()
		binary.BigEndian.PutUint64(buf, seq)
		binary.BigEndian.PutUint64(buf[8:], uint64(now.UnixNano()))
		for _, f := range p.flows {
			if _, err := f.c.Write(buf); err == nil {
				f.mu.Lock()
				f.sent++
				f.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Probes) receive(f *probeFlow) {
	defer p.rx.Done()
	buf := make([]byte, 2048)
	for {
		n, err := f.c.Read(buf)
		if err != nil {
			return
		}
		if n < 16 {
			continue
		}
		// "NAME: " + our 16 bytes
		seq := binary.BigEndian.Uint64(buf[n-16:])
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(buf[n-8:])))
		name := bytes.TrimSuffix(buf[:n-16], []byte(": "))
		f.mu.Lock()
		f.recv++
		if a := f.servers[string(name)]; a == nil {
			f.servers[string(name)] = &ServerAnswers{Replies: 1, First: sent, Last: sent}
		} else {
			a.Replies++
			if sent.Before(a.First) {
				a.First = sent
			}
			if sent.After(a.Last) {
				a.Last = sent
			}
		}
		if seq > f.lastSeq {
			if seq > f.lastSeq+1 {
				f.holes++
				if g := p.probedGap(f.lastSeq, seq); g > f.gap {
					f.gap = g
				}
				if f.firstLoss.IsZero() {
					f.firstLoss = f.lastSent
				}
				f.lastLoss = sent
			}
			f.lastSeq, f.lastSent = seq, sent
		}
		f.mu.Unlock()
	}
}

// Stop stops sending, waits for the last replies and returns the figures
// by target.
func (p *Probes) Stop() []ProbeStats {
	p.cancel()
	p.send.Wait()
	stopped := time.Now()
	time.Sleep(300 * time.Millisecond) // replies in flight
	p.closeAll()
	p.rx.Wait()
	by := map[string]*ProbeStats{}
	var order []string
	for _, f := range p.flows {
		s := by[f.target]
		if s == nil {
			s = &ProbeStats{Target: f.target, Interval: p.interval.String()}
			by[f.target] = s
			order = append(order, f.target)
		}
		s.Flows++
		s.Sent += f.sent
		if f.recv < f.sent {
			s.Lost += f.sent - f.recv
		}
		// The tail: datagrams sent after the last answered one and never
		// answered also count as a gap.
		if f.holes > 0 || f.recv < f.sent {
			s.FlowsHit++
		}
		if f.lastSent.Before(stopped.Add(-time.Second)) {
			// Replies stopped for good: the gap is at least the time
			// since the last answered datagram.
			s.Unrecovered++
			f.gap = max(f.gap, stopped.Sub(f.lastSent))
			if f.firstLoss.IsZero() {
				f.firstLoss = f.lastSent
			}
			f.lastLoss = stopped
		}
		if !f.firstLoss.IsZero() && (s.FirstLoss.IsZero() || f.firstLoss.Before(s.FirstLoss)) {
			s.FirstLoss = f.firstLoss
		}
		if f.lastLoss.After(s.LastLoss) {
			s.LastLoss = f.lastLoss
		}
		if f.gap > s.Gap {
			s.Gap = f.gap
		}
		for name, a := range f.servers {
			if s.Servers == nil {
				s.Servers = map[string]ServerAnswers{}
			}
			b, ok := s.Servers[name]
			if !ok {
				b = *a
			} else {
				b.Replies += a.Replies
				if a.First.Before(b.First) {
					b.First = a.First
				}
				if a.Last.After(b.Last) {
					b.Last = a.Last
				}
			}
			s.Servers[name] = b
		}
	}
	var out []ProbeStats
	for _, t := range order {
		out = append(out, *by[t])
	}
	return out
}
