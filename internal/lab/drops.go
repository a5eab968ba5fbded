package lab

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/netns"
)

// Drop counters: where a lost packet can have gone. A failover
// measurement snapshots them before and after each phase, so a loss comes
// with the counters that explain it: the data planes' per-reason counters
// (edges and agents, from their pinned maps) and, in every namespace, the
// kernel's interface drops (a veth's include frames redirected into a full
// ring) and its IP and UDP discard counters (no route, no socket, a full
// socket buffer).

// DropCounters is a snapshot: "node counter" -> packets.
type DropCounters map[string]uint64

// Drop is a counter that moved between two snapshots.
type Drop struct {
	Node    string `json:"node"`
	Counter string `json:"counter"`
	Delta   uint64 `json:"delta"`
}

func (d Drop) String() string { return fmt.Sprintf("%s %s +%d", d.Node, d.Counter, d.Delta) }

// dataplaneDropStats are the data planes' counters a snapshot keeps:
// every drop_ reason, and the packets handed to the kernel to forward
// (it may drop them in turn).
func dataplaneDropStat(name string) bool {
	return strings.HasPrefix(name, "drop_") || name == "decap_pass" || name == "lb_nat_pass"
}

// snmpDrops are the kernel's /proc/net/snmp counters a snapshot keeps.
var snmpDrops = map[string][]string{
	"Ip":  {"InHdrErrors", "InAddrErrors", "InUnknownProtos", "InDiscards", "OutDiscards", "OutNoRoutes"},
	"Udp": {"NoPorts", "InErrors", "RcvbufErrors", "SndbufErrors"},
}

// SnapshotDrops reads every node's drop counters. Nodes that cannot be
// read (a daemon between restarts still has its pins; a namespace is
// always there while the lab is up) are skipped.
func (l *Lab) SnapshotDrops() DropCounters {
	out := DropCounters{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range l.Topo.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := map[string]uint64{}
			if n.Role == "edge" || n.Role == "host" {
				if st, err := dataplane.PinnedStats(l.pinDir(n.Name)); err == nil {
					for k, c := range st {
						if dataplaneDropStat(k) {
							m["xdp:"+k] = c.Packets
						}
					}
				}
			}
			netns.Do(n.Netns, func() error {
				if links, err := netlink.LinkList(); err == nil {
					for _, lk := range links {
						a := lk.Attrs()
						if a.Statistics == nil || a.Name == "lo" {
							continue
						}
						m[a.Name+":rx_dropped"] = a.Statistics.RxDropped
						m[a.Name+":tx_dropped"] = a.Statistics.TxDropped
						m[a.Name+":rx_errors"] = a.Statistics.RxErrors
						m[a.Name+":tx_errors"] = a.Statistics.TxErrors
					}
				}
				readSNMP("/proc/thread-self/net/snmp", m)
				return nil
			})
			mu.Lock()
			for k, v := range m {
				out[n.Name+" "+k] = v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// readSNMP adds the snmpDrops counters of an snmp file (pairs of lines:
// "Proto: names..." then "Proto: values...").
func readSNMP(path string, m map[string]uint64) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var names []string
	var proto string
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		p := strings.TrimSuffix(fs[0], ":")
		if names == nil || p != proto {
			proto, names = p, fs[1:]
			continue
		}
		want := snmpDrops[p]
		for i, v := range fs[1:] {
			if i < len(names) && contains(want, names[i]) {
				if n, err := strconv.ParseUint(v, 10, 64); err == nil {
					m[p+":"+names[i]] = n
				}
			}
		}
		names = nil
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// DropsBetween lists the counters that grew from a to b, by node and
// counter.
func DropsBetween(a, b DropCounters) []Drop {
	var out []Drop
	for k, v := range b {
		if w, ok := a[k]; ok && v > w {
			node, counter, _ := strings.Cut(k, " ")
			out = append(out, Drop{Node: node, Counter: counter, Delta: v - w})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Counter < out[j].Counter
	})
	return out
}

// LogLine is a line of a node's log.
type LogLine struct {
	Node string
	Time time.Time
	Text string
}

// LogsBetween returns the lines the role processes (edges, agents) logged
// between from and to, in time order: what the daemons did while traffic
// was lost.
func (l *Lab) LogsBetween(from, to time.Time) []LogLine {
	var out []LogLine
	for _, n := range l.Topo.Nodes {
		if n.Process == nil || (n.Role != "edge" && n.Role != "host") {
			continue
		}
		b, err := os.ReadFile(n.Process.Log)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "time=") {
				continue
			}
			f := strings.SplitN(strings.TrimPrefix(line, "time="), " ", 2)
			t, err := time.Parse(time.RFC3339Nano, f[0])
			if err != nil || t.Before(from) || t.After(to) || len(f) < 2 {
				continue
			}
			out = append(out, LogLine{Node: n.Name, Time: t, Text: f[1]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// EndpointDrops counts the datagrams the lab's own endpoints dropped on a
// full socket buffer (Udp RcvbufErrors in the guests, the DMZ servers and
// the Internet node): traffic the gateway delivered and the measurement
// lost.
func (l *Lab) EndpointDrops(ds []Drop) uint64 {
	var n uint64
	for _, d := range ds {
		if d.Counter != "Udp:RcvbufErrors" {
			continue
		}
		if nd := l.Topo.Node(d.Node); nd != nil && (nd.Role == "guest" || nd.Role == "server" || nd.Role == "internet") {
			n += d.Delta
		}
	}
	return n
}
