package lab

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/azgate/azgate/internal/netns"
)

// ICMP6Counter is the kernel's count of ICMPv6 destination-unreachable
// messages sent (/proc/net/snmp6): what an edge's kernel sends for IPv6
// traffic to an address of its set's prefix that no IPv6 EIP or VIP
// takes, which ends at the discard route.
const ICMP6Counter = "Icmp6OutDestUnreachs"

// SNMP6 reads a counter of the kernel's IPv6 statistics in each named
// node's namespace (/proc/net/snmp6 there), by node.
func (l *Lab) SNMP6(counter string, nodes ...string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for _, name := range nodes {
		n := l.Topo.Node(name)
		if n == nil {
			return nil, fmt.Errorf("no lab node %q", name)
		}
		var v uint64
		var found bool
		err := netns.Do(n.Netns, func() error {
			f, err := os.Open("/proc/thread-self/net/snmp6")
			if err != nil {
				return err
			}
			defer f.Close()
			v, found, err = snmp6Value(f, counter)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: snmp6: %w", name, err)
		}
		if !found {
			return nil, fmt.Errorf("%s: snmp6 has no %s", name, counter)
		}
		out[name] = v
	}
	return out, nil
}

// snmp6Value finds a counter in an snmp6 file ("Name value" a line).
func snmp6Value(r io.Reader, counter string) (uint64, bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != counter {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		return n, err == nil, err
	}
	return 0, false, sc.Err()
}
