//go:build !node

package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "firewall", Short: "Firewall rules: deny or allow Internet sources to EIPs and VIPs (deny beats allow; an allow list makes a destination private)"}
		var (
			action, set, address, proto, ports, desc string
			sources                                  []string
		)
		add := &cobra.Command{
			Use:   "add NAME --action deny|allow --source PREFIX[,PREFIX...] [--address EIP-OR-VIP | --set SET] [--protocol tcp|udp|icmp|any] [--port N|N-M]",
			Short: "Add a firewall rule (global unless --address or --set names its destination)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				r, err := firewallRule(args[0], action, sources, set, address, proto, ports, desc)
				if err != nil {
					return err
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.Create(cmd.Context(), r)
				if err != nil {
					return err
				}
				return writeResult(cmd, "firewall rule "+r.Name, res, r)
			},
		}
		f := add.Flags()
		f.StringVar(&action, "action", "", "deny or allow")
		f.StringSliceVar(&sources, "source", nil, "source IPv4 or IPv6 prefix or address (repeat or separate with commas; 0.0.0.0/0 is every IPv4 source, ::/0 every IPv6 one)")
		f.StringVar(&address, "address", "", "destination: one EIP or VIP (by address)")
		f.StringVar(&set, "set", "", "destination: every EIP and VIP an edge set serves")
		f.StringVar(&proto, "protocol", "", "tcp, udp, icmp or any (default any)")
		f.StringVar(&ports, "port", "", "destination port or range N-M (tcp and udp only; default every port)")
		f.StringVar(&desc, "description", "", "free text")
		add.MarkFlagRequired("action")
		add.MarkFlagRequired("source")
		c.AddCommand(add)
		c.AddCommand(objectCommands(model.KindFirewallRule, describeFirewallRule, firewallTable)...)
		return c
	})
}

// firewallRule builds a rule from the add command's flags; errors name the
// flag.
func firewallRule(name, action string, sources []string, set, address, proto, ports, desc string) (*model.FirewallRule, error) {
	r := &model.FirewallRule{Name: name, Action: action, Set: set, Protocol: proto, Description: desc}
	for _, s := range sources {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return nil, fmt.Errorf("--source %q is not a prefix (A.B.C.D/N, X:X::X/N) or an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		r.Sources = append(r.Sources, p)
	}
	if address != "" {
		a, err := parseAddr("--address", address)
		if err != nil {
			return nil, err
		}
		r.Address = a
	}
	if ports != "" {
		lo, hi, isRange := strings.Cut(ports, "-")
		p, err := strconv.ParseUint(lo, 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("--port %q: want a port 1-65535 or a range N-M", ports)
		}
		r.Port = uint16(p)
		if isRange {
			q, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || q == 0 {
				return nil, fmt.Errorf("--port %q: want a port 1-65535 or a range N-M", ports)
			}
			r.PortEnd = uint16(q)
		}
	}
	if es := r.Validate(); len(es) > 0 {
		return nil, es
	}
	return r, nil
}

func ruleProto(r *model.FirewallRule) string {
	if r.Protocol == "" {
		return model.ProtoAny
	}
	return r.Protocol
}

func rulePorts(r *model.FirewallRule) string {
	switch lo, hi := r.Ports(); {
	case lo == 0 && hi == 65535:
		return "any"
	case lo == hi:
		return strconv.Itoa(int(lo))
	default:
		return fmt.Sprintf("%d-%d", lo, hi)
	}
}

func ruleSources(r *model.FirewallRule) string {
	var s []string
	for i, p := range r.Sources {
		if i == 3 {
			s = append(s, fmt.Sprintf("(+%d)", len(r.Sources)-3))
			break
		}
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// firewallCounters sums each rule's counters over the edges that report
// them (nil when the status cannot be read: the table shows "-").
func firewallCounters(ctx context.Context) map[string]model.Count {
	cl, err := apiClient()
	if err != nil {
		return nil
	}
	st, err := cl.Status(ctx)
	if err != nil {
		return nil
	}
	out := map[string]model.Count{}
	for _, ns := range st.Nodes {
		for _, n := range ns {
			for rule, c := range n.Firewall {
				t := out[rule]
				t.Packets += c.Packets
				t.Bytes += c.Bytes
				out[rule] = t
			}
		}
	}
	return out
}

func describeFirewallRule(w io.Writer, o model.Object) {
	r := o.(*model.FirewallRule)
	tw := newTable(w)
	row(tw, "name:", r.Name)
	row(tw, "action:", r.Action)
	var src []string
	for _, p := range r.Sources {
		src = append(src, p.String())
	}
	row(tw, "sources:", strings.Join(src, ", "))
	row(tw, "destination:", r.Destination())
	row(tw, "protocol:", ruleProto(r))
	row(tw, "ports:", rulePorts(r))
	row(tw, "description:", r.Description)
	if c, ok := firewallCounters(context.Background())[r.Name]; ok {
		what := "dropped"
		if r.Action == model.FirewallAllow {
			what = "allowed"
		}
		row(tw, what+":", fmt.Sprintf("%d packets, %d bytes (summed over the edges)", c.Packets, c.Bytes))
	}
	tw.Flush()
}

func firewallTable(w io.Writer, objs []model.Object) {
	counters := firewallCounters(context.Background())
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
	tw := newTable(w, "NAME", "ACTION", "SOURCES", "DESTINATION", "PROTOCOL", "PORTS", "PACKETS", "BYTES")
	for _, o := range objs {
		r := o.(*model.FirewallRule)
		pk, by := "-", "-"
		if c, ok := counters[r.Name]; ok {
			pk, by = strconv.FormatUint(c.Packets, 10), strconv.FormatUint(c.Bytes, 10)
		}
		row(tw, r.Name, r.Action, ruleSources(r), r.Destination(), ruleProto(r), rulePorts(r), pk, by)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no firewall rules)")
	}
}
