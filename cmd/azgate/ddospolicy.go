//go:build !node

package main

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// azgate ddos policy: the DDoS policies (docs/ddos.md, "Policy").
func ddosPolicyCommand() *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "DDoS policies: the detection's thresholds at run time (region-wide and per edge set), over the controller's --ddos-* flags"}
	var (
		pps, bps, syn            int64
		factor, weight, release  float64
		enter                    int
		cooldown                 time.Duration
		addrs, dropAddrs, unsets []string
		desc                     string
	)
	set := &cobra.Command{
		Use:   "set [region|SET] [--pps N] [--bps N] [--syn N] [--address ADDR:pps=N,bps=N,syn=N] ...",
		Short: "Create or change a DDoS policy: only the flags given change (region is the default name)",
		Long: `Creates the policy or changes the fields named by flags, leaving the others
as they are. A threshold is a number (packets/s, bit/s, SYN/s), -1 turns the
rate's check off, --unset pps,bps,... makes a field inherit again (the region
policy's from the controller's flags, a set policy's from the region policy).
The baseline, enter, release and cool-down settings and --address entries
belong to the region policy only.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := model.DDoSPolicyRegion
			if len(args) == 1 {
				name = args[0]
			}
			fl := cmd.Flags()
			entries, err := parsePolicyAddresses(addrs)
			if err != nil {
				return err
			}
			var drop []netip.Addr
			for _, s := range dropAddrs {
				a, err := parseAddr("--remove-address", s)
				if err != nil {
					return err
				}
				drop = append(drop, a)
			}
			edit := func(o model.Object) error {
				p := o.(*model.DDoSPolicy)
				for _, u := range unsets {
					for _, f := range strings.Split(u, ",") {
						switch strings.TrimSpace(f) {
						case "pps":
							p.Thresholds.PPS = 0
						case "bps":
							p.Thresholds.BPS = 0
						case "syn":
							p.Thresholds.SYNPS = 0
						case "baseline-factor":
							p.BaselineFactor = 0
						case "baseline-weight":
							p.BaselineWeight = 0
						case "enter":
							p.EnterRounds = 0
						case "release":
							p.ReleaseFraction = 0
						case "cooldown":
							p.Cooldown = 0
						default:
							return &usageError{fmt.Sprintf("--unset %q: want pps, bps, syn, baseline-factor, baseline-weight, enter, release or cooldown", f)}
						}
					}
				}
				if fl.Changed("pps") {
					p.Thresholds.PPS = pps
				}
				if fl.Changed("bps") {
					p.Thresholds.BPS = bps
				}
				if fl.Changed("syn") {
					p.Thresholds.SYNPS = syn
				}
				if fl.Changed("baseline-factor") {
					p.BaselineFactor = factor
				}
				if fl.Changed("baseline-weight") {
					p.BaselineWeight = weight
				}
				if fl.Changed("enter") {
					p.EnterRounds = enter
				}
				if fl.Changed("release") {
					p.ReleaseFraction = release
				}
				if fl.Changed("description") {
					p.Description = desc
				}
				if fl.Changed("cooldown") {
					p.Cooldown = model.Duration(cooldown)
				}
				kept := p.Addresses[:0]
				for _, e := range p.Addresses {
					if !containsAddr(drop, e.Address) && !hasEntry(entries, e.Address) {
						kept = append(kept, e)
					}
				}
				p.Addresses = append(kept, entries...)
				if len(p.Addresses) == 0 {
					p.Addresses = nil
				}
				return nil
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, o, err := cl.Edit(cmd.Context(), model.KindDDoSPolicy, name, edit)
			if client.IsNotFound(err) {
				p := &model.DDoSPolicy{Name: name}
				if err := edit(p); err != nil {
					return err
				}
				res, err = cl.Create(cmd.Context(), p)
				o = p
			}
			if err != nil {
				return err
			}
			return writeResult(cmd, "DDoS policy "+name, res, o)
		},
	}
	f := set.Flags()
	f.Int64Var(&pps, "pps", 0, "packets/s to one EIP that trigger a quarantine (-1: not checked)")
	f.Int64Var(&bps, "bps", 0, "bits/s to one EIP that trigger a quarantine (-1: not checked)")
	f.Int64Var(&syn, "syn", 0, "TCP SYNs/s to one EIP that trigger a quarantine (-1: not checked)")
	f.Float64Var(&factor, "baseline-factor", 0, "region: the trigger level is max(threshold, this × the EIP's baseline)")
	f.Float64Var(&weight, "baseline-weight", 0, "region: weight of one interval in the baseline's moving average (0..1]")
	f.IntVar(&enter, "enter", 0, "region: consecutive intervals above the trigger level before a quarantine")
	f.Float64Var(&release, "release", 0, "region: every rate must stay below this fraction of its trigger level for the cool-down")
	f.DurationVar(&cooldown, "cooldown", 0, "region: how long a quarantined EIP must stay calm before it is released")
	f.StringArrayVar(&addrs, "address", nil, `region: thresholds of one EIP, "ADDR:pps=N,bps=N,syn=N" (any of them; repeatable; replaces the EIP's entry)`)
	f.StringArrayVar(&dropAddrs, "remove-address", nil, "region: drop an EIP's entry (repeatable)")
	f.StringVar(&desc, "description", "", "free text")
	f.StringSliceVar(&unsets, "unset", nil, "fields to inherit again: pps, bps, syn, baseline-factor, baseline-weight, enter, release, cooldown")
	c.AddCommand(set)
	c.AddCommand(objectCommands(model.KindDDoSPolicy, describeDDoSPolicy, ddosPolicyTable)...)
	return c
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

func hasEntry(es []model.DDoSAddress, a netip.Addr) bool {
	for _, e := range es {
		if e.Address == a {
			return true
		}
	}
	return false
}

// parsePolicyAddresses reads --address values: "ADDR:pps=N,bps=N,syn=N".
func parsePolicyAddresses(vs []string) ([]model.DDoSAddress, error) {
	var out []model.DDoSAddress
	for _, v := range vs {
		addr, rest, ok := strings.Cut(v, ":")
		a, err := netip.ParseAddr(addr)
		if !ok || err != nil || rest == "" {
			return nil, &usageError{fmt.Sprintf("--address %q: want ADDR:pps=N,bps=N,syn=N", v)}
		}
		e := model.DDoSAddress{Address: a}
		for _, kv := range strings.Split(rest, ",") {
			k, val, ok := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(val, 10, 64)
			if !ok || err != nil {
				return nil, &usageError{fmt.Sprintf("--address %q: %q: want pps=N, bps=N or syn=N with N a whole number (-1: not checked)", v, kv)}
			}
			switch k {
			case "pps":
				e.Thresholds.PPS = n
			case "bps":
				e.Thresholds.BPS = n
			case "syn":
				e.Thresholds.SYNPS = n
			default:
				return nil, &usageError{fmt.Sprintf("--address %q: unknown rate %q (want pps, bps or syn)", v, k)}
			}
		}
		if hasEntry(out, a) {
			return nil, &usageError{fmt.Sprintf("--address: %v given twice", a)}
		}
		out = append(out, e)
	}
	return out, nil
}

func describeDDoSPolicy(w io.Writer, o model.Object) {
	b, err := yaml.Marshal(o)
	if err != nil {
		fmt.Fprintln(w, err)
		return
	}
	w.Write(b)
}

// threshold prints a policy threshold: "-" inherited, "off", or the level.
func threshold(v int64) string {
	switch v {
	case 0:
		return "-"
	case -1:
		return "off"
	}
	return strconv.FormatInt(v, 10)
}

func ddosPolicyTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "PPS", "BPS", "SYN/S", "COOLDOWN", "ADDRESSES")
	for _, o := range objs {
		p := o.(*model.DDoSPolicy)
		cd := "-"
		if p.Cooldown != 0 {
			cd = time.Duration(p.Cooldown).String()
		}
		row(tw, p.Name, threshold(p.Thresholds.PPS), threshold(p.Thresholds.BPS), threshold(p.Thresholds.SYNPS), cd, len(p.Addresses))
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no DDoS policy: the controllers' --ddos-* flags apply)")
	}
}
