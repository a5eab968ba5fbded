package gslbrole

import (
	"context"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// TestRoleListenTwo: the role listening on two specific addresses, an
// IPv4 one and an IPv6 one (Config.Listen, gslb's repeatable --listen),
// answers A and AAAA on both, over UDP and TCP, as dig -4 and dig -6 see
// it; the status lists both.
func TestRoleListenTwo(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Skip("needs dig (bind9-dnsutils)")
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback here (%v)", err)
	} else {
		ln.Close()
	}
	ctrl := startController(t)
	cl := client.New(ctrl.URL(), ctrl.Token())
	zone := &model.DNSZone{Name: "example", NS: []string{"ns1.example"},
		Records: []model.ZoneRecord{{Name: "ns1", Type: "A", Value: "192.0.2.53"}, {Name: "ns1", Type: "AAAA", Value: "2001:db8::53"}}}
	if _, err := cl.Create(context.Background(), zone); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "gslb-1", Listen: []string{"127.0.0.1:0", "[::1]:0"}}
	r := startRole(t, ctrl.Store(), cfg)
	if len(r.g.Servers) != 2 {
		t.Fatalf("%d servers, want 2", len(r.g.Servers))
	}
	addrs := strings.Split(r.addr, ",")
	if len(addrs) != 2 || !strings.HasPrefix(addrs[0], "127.0.0.1:") || !strings.HasPrefix(addrs[1], "[::1]:") {
		t.Fatalf("serving on %q, want 127.0.0.1:PORT,[::1]:PORT", r.addr)
	}
	if st := r.g.Status(); st.GSLB == nil || st.GSLB.Listen != r.addr {
		t.Errorf("status listen %+v, want %q", st.GSLB, r.addr)
	}
	for i, fam := range []string{"-4", "-6"} {
		host, port, _ := net.SplitHostPort(addrs[i])
		if tcp := r.g.Servers[i].TCPAddr().String(); tcp != addrs[i] {
			t.Errorf("TCP on %s, want %s (UDP's)", tcp, addrs[i])
		}
		for _, proto := range []string{"+notcp", "+tcp"} {
			for qtype, want := range map[string]string{"A": "192.0.2.53", "AAAA": "2001:db8::53"} {
				deadline := time.Now().Add(10 * time.Second)
				for {
					out, err := exec.Command("dig", fam, "@"+host, "-p", port, proto, "+short", "+tries=1", "+time=2", "ns1.example.", qtype).CombinedOutput()
					got := strings.Fields(string(out))
					if err == nil && slices.Equal(got, []string{want}) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("dig %s @%s -p %s %s ns1.example %s: %v %q, want %s", fam, host, port, proto, qtype, err, out, want)
					}
					time.Sleep(50 * time.Millisecond) // the catalog follows the store
				}
			}
		}
	}
}

// Listen given twice is refused.
func TestListenTwice(t *testing.T) {
	if _, err := New(nil, Config{Name: "g", Listen: []string{"127.0.0.1:5353", "127.0.0.1:5353"}}); err == nil || !strings.Contains(err.Error(), "listen 127.0.0.1:5353: given twice") {
		t.Fatalf("New: %v", err)
	}
}
