package dataplane

import (
	"fmt"
	"os"
	"strings"
)

// ForwardingOff returns the interfaces of ifaces whose IPv4 forwarding
// is off (net.ipv4.conf.IFACE.forwarding = 0) in the calling thread's
// network namespace. The kernel's bpf_fib_lookup answers "forwarding
// disabled" for a packet that came in on such an interface, so the XDP
// programs drop what they would forward there (drop_fib): an edge or
// an agent on a host where nobody turned forwarding on forwards nothing.
// An interface whose setting cannot be read is not reported.
func ForwardingOff(ifaces []string) []string { return forwardingOff("ipv4", ifaces) }

// Forwarding6Off is ForwardingOff for IPv6 (net.ipv6.conf.IFACE.forwarding):
// an IPv6 underlay's outer lookups (fib6f) answer "forwarding disabled"
// on such an interface too.
func Forwarding6Off(ifaces []string) []string { return forwardingOff("ipv6", ifaces) }

func forwardingOff(family string, ifaces []string) []string {
	var off []string
	for _, ifc := range ifaces {
		if ifc == "" || ifc == "." || ifc == ".." || strings.Contains(ifc, "/") {
			continue // no interface name: nothing to read
		}
		// The directory is the interface's name as it is, dots included
		// (eth0.100), unlike sysctl's dotted keys.
		b, err := os.ReadFile("/proc/sys/net/" + family + "/conf/" + ifc + "/forwarding")
		if err == nil && strings.TrimSpace(string(b)) == "0" {
			off = append(off, ifc)
		}
	}
	return off
}

// ForwardingHint is the warning a role logs for ForwardingOff's answer.
func ForwardingHint(off []string) string {
	return fmt.Sprintf("IPv4 forwarding is off on %s: the XDP program drops every packet it would forward from there (drop_fib); "+
		"turn it on (sysctl -w net.ipv4.conf.all.forwarding=1, or per interface; docs/deploy.md, \"Forwarding\")", strings.Join(off, ", "))
}

// Forwarding6Hint is the warning for Forwarding6Off's answer.
func Forwarding6Hint(off []string) string {
	return fmt.Sprintf("IPv6 forwarding is off on %s: over the IPv6 underlay the XDP program drops every packet it would tunnel from there (drop_fib); "+
		"turn it on (sysctl -w net.ipv6.conf.all.forwarding=1, or per interface; docs/deploy.md, \"Forwarding\")", strings.Join(off, ", "))
}
