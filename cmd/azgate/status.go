//go:build !node

package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		return &cobra.Command{
			Use:   "status",
			Short: "Show the controller and every edge and agent that reports to the store",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				st, err := cl.Status(cmd.Context())
				if err != nil {
					return err
				}
				if globals.json {
					return printJSON(cmd.OutOrStdout(), st)
				}
				printStatus(cmd.OutOrStdout(), st, time.Now())
				return nil
			},
		}
	})
}

func printStatus(w io.Writer, st *client.Status, now time.Time) {
	c := st.Controller
	tw := newTable(w)
	row(tw, "controller:", fmt.Sprintf("version %s, %s store, revision %d, up %s", c.Version, c.Store, c.Revision, ago(now, c.Started)))
	var counts []string
	for _, k := range model.Kinds {
		counts = append(counts, fmt.Sprintf("%d %s", c.Objects[k], k))
	}
	row(tw, "objects:", strings.Join(counts, ", "))
	tw.Flush()
	fmt.Fprintln(w)

	var nodes []model.NodeStatus
	for _, ns := range st.Nodes {
		nodes = append(nodes, ns...)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if nodes[i].Role != nodes[j].Role {
			return nodes[i].Role < nodes[j].Role
		}
		return nodes[i].Name < nodes[j].Name
	})
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no node reports its status")
	} else {
		tw = newTable(w, "ROLE", "NAME", "REVISION", "INTERFACES", "ROUTES", "UPDATED", "ENCAP_TX", "DECAP_TX", "DROPS", "ERRORS")
		for _, n := range nodes {
			var drops uint64
			for name, cnt := range n.Counters {
				if strings.HasPrefix(name, "drop_") {
					drops += cnt.Packets
				}
			}
			row(tw, n.Role, n.Name, n.AppliedRevision, strings.Join(n.Interfaces, ","), n.Routes, ago(now, n.Updated)+" ago",
				n.Counters["encap_tx"].Packets, n.Counters["decap_tx"].Packets, drops, len(n.Errors))
		}
		tw.Flush()
	}
	printBGP(w, nodes, now)
	for _, n := range nodes {
		if n.ARP != nil {
			fmt.Fprintf(w, "%s %s: %s\n", n.Role, n.Name, arpLine(n.ARP, now))
		}
	}
	for _, n := range nodes {
		if n.Bandwidth != nil {
			fmt.Fprintf(w, "%s %s: %s\n", n.Role, n.Name, bandwidthLine(n.Bandwidth))
		}
	}
	for _, n := range nodes {
		for _, e := range n.Errors {
			fmt.Fprintf(w, "%s %s: %s\n", n.Role, n.Name, e)
		}
	}
	for _, e := range st.Errors {
		fmt.Fprintln(w, "warning:", e)
	}
}

// arpLine says whether an edge answers ARP on its shared segments.
func arpLine(a *model.ARPStatus, now time.Time) string {
	on := strings.Join(a.Interfaces, ",")
	switch {
	case a.Owner && len(a.IPv6) > 0:
		return fmt.Sprintf("ARP owner of %s on %s for %s (NDP too, for %d IPv6 addresses)", a.Scope, on, ago(now, a.Since), len(a.IPv6))
	case a.Owner:
		return fmt.Sprintf("ARP owner of %s on %s for %s", a.Scope, on, ago(now, a.Since))
	case a.Scope == "":
		return fmt.Sprintf("answers no ARP on %s (in no set, or drained) for %s", on, ago(now, a.Since))
	}
	return fmt.Sprintf("ARP standby for %s on %s (another member owns it) for %s", a.Scope, on, ago(now, a.Since))
}

// bandwidthLine says where a node's bandwidth limits come from
// (docs/bandwidth.md, "Hosts: measurement and enforcement").
func bandwidthLine(b *model.BandwidthStatus) string {
	static := 0
	for _, e := range b.EIPs {
		if e.Mode == "static" {
			static++
		}
	}
	n := len(b.EIPs) + b.EIPsLeftOut
	src := "static split (no limits from a manager)"
	if b.Mode == "managed" {
		src = fmt.Sprintf("managed, limits %s old (generation %d)", (time.Duration(b.LimitsAgeMS) * time.Millisecond).Round(100*time.Millisecond), b.Generation)
	}
	out := fmt.Sprintf("bandwidth %s in zone %s: %s; %d packaged EIPs limited", b.Direction, b.Zone, src, n)
	if static > 0 && b.Mode == "managed" {
		out += fmt.Sprintf(", %d of them on the static split", static)
	}
	return out
}

// ago is how long ago t was, rounded for people.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// printBGP lists each edge's BGP: whether it announces (or which
// conditions fail), what it advertises and its sessions.
func printBGP(w io.Writer, nodes []model.NodeStatus, now time.Time) {
	first := true
	for _, n := range nodes {
		b := n.BGP
		if b == nil {
			continue
		}
		if first {
			fmt.Fprintln(w)
			first = false
		}
		state := "announcing"
		if !b.Announcing {
			state = "withdrawn"
			if len(b.Failing) > 0 {
				state += " (" + strings.Join(b.Failing, "; ") + ")"
			}
		}
		adv := "nothing"
		if len(b.Advertised) > 0 {
			adv = strings.Join(b.Advertised, ", ")
		}
		fmt.Fprintf(w, "bgp %s: %s, advertising %s\n", n.Name, state, adv)
		for _, ss := range b.Sessions {
			up := ""
			if !ss.Since.IsZero() {
				up = " for " + ago(now, ss.Since)
			}
			fmt.Fprintf(w, "  peer %s AS%d %s%s, %d received, %d advertised\n", ss.Peer, ss.ASN, ss.State, up, ss.Received, ss.Advertised)
		}
	}
}
