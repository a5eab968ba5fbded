package edge

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/flowhash"
	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/store/embeddedtest"
)

// TestRunAttachFailsAfterARPStarted is issue 17.4's case: the second
// --attach interface does not exist, so attaching fails after the ARP
// owner (on the first, an --arp-iface) started. Run must return that
// error promptly, naming the interface, not wait for the ARP owner
// forever (which left an edge alive with no control plane and no BGP).
func TestRunAttachFailsAfterARPStarted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace and XDP")
	}
	n, err := netlab.NewNode(fmt.Sprintf("azgt-start-%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Delete() })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "e0"}, PeerName: "e1"}
	if err := n.Handle().LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"e0", "e1"} {
		l, err := n.Handle().LinkByName(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Handle().LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	s := embeddedtest.Store(t)
	pins := dataplane.NodePinDir(fmt.Sprintf("azgt-start-%d", os.Getpid()))
	t.Cleanup(func() { dataplane.RemovePins(pins) })
	cfg := Config{Name: "edge-a1", Interfaces: []string{"e0", "nosuch0"}, HashSeed: flowhash.DefaultHashSeed, Log: quiet,
		ICMPSource: netip.MustParseAddr("192.0.2.1"), ARP: ARPConfig{Ifaces: []string{"e0"}}}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- n.Do(func() error { return Run(ctx, cfg, s, dataplane.LoadOptions{PinDir: pins}, "") })
	}()
	t.Cleanup(func() { cancel(); <-errc }) // unblocks the old code too
	select {
	case err := <-errc:
		errc <- err // for the cleanup
		if err == nil || !strings.Contains(err.Error(), "nosuch0") {
			t.Fatalf("Run returned %v, want the attach error naming nosuch0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after attaching failed: it hangs on its ARP owner")
	}
}
