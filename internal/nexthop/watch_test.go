package nexthop

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/netlab"
)

// TestWatchRoutingLinkAtOnce: a link change calls changed at once, not
// after the route and neighbour debounce. The debounce is set to an hour
// here, so only the link path can call it within the wait; before the
// link path, a link change waited 20 ms like a route (a lost carrier's
// withdrawal with it).
func TestWatchRoutingLinkAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: network namespaces need root")
	}
	n, err := netlab.NewNode("azgt-wr-n")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Delete()
	// No IPv6 (its address configuration sends link notifications of its
	// own) and a veth pair whose ends stay down (no carrier to settle):
	// the only link change after the subscription is the test's.
	for _, argv := range [][]string{
		{"sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"},
		{"ip", "link", "add", "wr0", "type", "veth", "peer", "name", "wr1"},
	} {
		if out, err := n.Cmd(argv...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	old := debounce
	debounce = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 1)
	var done <-chan struct{}
	err = n.Do(func() error {
		var err error
		done, err = WatchRouting(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), func() {
			select {
			case calls <- struct{}{}:
			default:
			}
		})
		return err
	})
	defer func() {
		cancel()
		if done != nil {
			<-done
		}
		debounce = old
	}()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetLinks(true, "wr0"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-calls:
	case <-time.After(10 * time.Second):
		t.Fatal("no call 10 s after a link came up: link changes wait for the route debounce")
	}
}
