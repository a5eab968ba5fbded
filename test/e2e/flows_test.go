package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/netns"
)

// vipSame is the VIP of TestEIPAndServiceSameGuest's service, whose one
// backend, az1-h1/g1, also has EIP eip.
const vipSame = "198.51.100.40"

// TestEIPAndServiceSameGuest (issue 7, section 2): a guest with an EIP
// that is also an encap-mode backend. With a fixed, a range and an any-port
// listener in turn, the VIP and the EIP both answer on the same guest port
// (the agent translates each reply by the flow it belongs to), and the
// guest's own outbound connection leaves with its EIP as source. A guest
// without an EIP opens no connection to the outside, and it is counted.
func TestEIPAndServiceSameGuest(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	const guest = "hello from az1-h1-g1"
	if _, err := c.BindEIP(ctx, eip, "az1-h1", "g1"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitAnswer(ctx, "http://"+eip+"/", guest, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	g1 := []model.Backend{{Host: "az1-h1", Guest: "g1"}}
	g1port80 := []model.Backend{{Host: "az1-h1", Guest: "g1", Port: 80}}

	for _, tc := range []struct {
		name      string
		listeners []model.Listener
		pools     []model.Pool
		// VIP URLs and EIP URLs that must answer, with the answer.
		vip, eip map[string]string
	}{
		{name: "fixed ports",
			// Port 80 kept, and VIP port 8080 onto the same guest port 80:
			// one guest port answers for two VIP ports and the EIP.
			listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "p"}, {Protocol: "tcp", Port: 8080, Pool: "q"}},
			pools:     []model.Pool{{Name: "p", Backends: g1}, {Name: "q", Backends: g1port80}},
			vip:       map[string]string{"http://" + vipSame + "/": guest, "http://" + vipSame + ":8080/": guest},
			eip:       map[string]string{"http://" + eip + "/": guest}},
		{name: "range",
			listeners: []model.Listener{{Protocol: "tcp", Port: 440, PortEnd: 450, Pool: "p"}},
			pools:     []model.Pool{{Name: "p", Backends: g1}},
			vip:       map[string]string{"http://" + vipSame + ":443/": guest + ":443"},
			eip:       map[string]string{"http://" + eip + ":443/": guest + ":443", "http://" + eip + "/": guest}},
		{name: "any port",
			listeners: []model.Listener{{Protocol: "tcp", Pool: "p"}},
			pools:     []model.Pool{{Name: "p", Backends: g1}},
			vip:       map[string]string{"http://" + vipSame + "/": guest, "http://" + vipSame + ":443/": guest + ":443"},
			eip:       map[string]string{"http://" + eip + "/": guest, "http://" + eip + ":443/": guest + ":443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &model.Service{Name: "same", VIP: netip.MustParseAddr(vipSame), Mode: model.ModeEncap,
				Listeners: tc.listeners, Pools: tc.pools}
			if _, err := c.PutService(ctx, svc); err != nil {
				t.Fatal(err)
			}
			for url := range tc.vip {
				waitServing(t, ctx, l, url)
			}
			// Both, interleaved, on new connections each time.
			for i := 0; i < 5; i++ {
				for _, urls := range []map[string]string{tc.vip, tc.eip} {
					for url, want := range urls {
						body, err := l.Get(ctx, "inet", url, 2*time.Second)
						if err != nil || body != want {
							t.Fatalf("%s: %q %v, want %q", url, body, err, want)
						}
					}
				}
			}
			outboundFrom(t, ctx, l, "az1-h1-g1", eip)
		})
	}

	t.Run("guest without an EIP opens no connection outside", func(t *testing.T) {
		before := agentCounter(t, ctx, l, "az1-h1", "drop_no_eip")
		if src, err := dialInet(ctx, l, "az1-h1-g2", time.Second); err == nil {
			t.Fatalf("az1-h1/g2 (no EIP) reached the Internet from %v", src)
		}
		deadline := time.Now().Add(10 * time.Second)
		for agentCounter(t, ctx, l, "az1-h1", "drop_no_eip") == before {
			if time.Now().After(deadline) {
				t.Fatal("the agent of az1-h1 did not count the refused connection (drop_no_eip)")
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// outboundFrom opens a TCP connection from a guest to a listener in the
// Internet namespace and requires it to arrive from want.
func outboundFrom(t *testing.T, ctx context.Context, l *lab.Lab, guest, want string) {
	t.Helper()
	src, err := dialInet(ctx, l, guest, 3*time.Second)
	if err != nil {
		t.Fatalf("%s: outbound connection to the Internet: %v", guest, err)
	}
	if src.String() != want {
		t.Fatalf("%s: outbound connection arrived from %v, want its EIP %s", guest, src, want)
	}
}

// dialInet connects from a lab guest to a fresh listener on the Internet
// node and returns the source address the listener saw.
func dialInet(ctx context.Context, l *lab.Lab, guest string, timeout time.Duration) (netip.Addr, error) {
	var ln net.Listener
	if err := netns.Do(l.Topo.Node("inet").Netns, func() error {
		var err error
		ln, err = net.Listen("tcp", lab.ClientAddr+":0")
		return err
	}); err != nil {
		return netip.Addr{}, err
	}
	defer ln.Close()
	got := make(chan netip.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		got <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	}()
	n := l.Topo.Node(guest)
	if n == nil {
		return netip.Addr{}, fmt.Errorf("no lab node %q", guest)
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := lab.Dialer(n.Netns)(dctx, "tcp", ln.Addr().String())
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	select {
	case a := <-got:
		return a, nil
	case <-dctx.Done():
		return netip.Addr{}, fmt.Errorf("connected, but the listener saw nothing: %w", dctx.Err())
	}
}

// agentCounter reads a data-plane counter from a node's published status.
func agentCounter(t *testing.T, ctx context.Context, l *lab.Lab, node, name string) uint64 {
	t.Helper()
	st, err := l.NodeStatuses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := st[node]
	if !ok {
		t.Fatalf("no status of node %s", node)
	}
	return s.Counters[name].Packets
}
