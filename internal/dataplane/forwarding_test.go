package dataplane

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/azgate/azgate/internal/netlab"
	"github.com/azgate/azgate/internal/netns"
)

// TestForwardingOff: in a namespace of the test's own, an interface with
// IPv4 forwarding off is named, one with it on is not, and the hint says
// what to do; names that are no interface read nothing.
func TestForwardingOff(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	name := fmt.Sprintf("azt-fwd%d", os.Getpid())
	a, err := netlab.NewNode(name + "a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Delete() })
	b, err := netlab.NewNode(name + "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Delete() })
	if err := netlab.Veth(netlab.End{Node: a, Dev: "fw0"}, netlab.End{Node: b, Dev: "fw1"}, 0); err != nil {
		t.Fatal(err)
	}
	check := func(value string, want []string) {
		t.Helper()
		if err := netns.Sysctl(a.Name, "net.ipv4.conf.fw0.forwarding", value); err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := a.Do(func() error {
			got = ForwardingOff([]string{"fw0", "nosuch0", "..", "../all", ""})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("forwarding=%s: ForwardingOff = %v, want %v", value, got, want)
		}
	}
	check("0", []string{"fw0"})
	check("1", nil)
	h := ForwardingHint([]string{"fw0"})
	for _, want := range []string{"fw0", "drop_fib", "net.ipv4.conf.all.forwarding=1"} {
		if !strings.Contains(h, want) {
			t.Errorf("hint %q does not say %q", h, want)
		}
	}
	// IPv6 (an IPv6 underlay), read apart from IPv4's (now on).
	check6 := func(value string, want []string) {
		t.Helper()
		if err := netns.Sysctl(a.Name, "net.ipv6.conf.fw0.forwarding", value); err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := a.Do(func() error {
			got = Forwarding6Off([]string{"fw0", "nosuch0", "..", ""})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ipv6 forwarding=%s: Forwarding6Off = %v, want %v", value, got, want)
		}
	}
	check6("0", []string{"fw0"})
	check6("1", nil)
	if h := Forwarding6Hint([]string{"fw0"}); !strings.Contains(h, "net.ipv6.conf.all.forwarding=1") || !strings.Contains(h, "fw0") {
		t.Errorf("IPv6 hint %q", h)
	}
}
