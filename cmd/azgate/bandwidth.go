//go:build !node

package main

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// azgate bandwidth: shared bandwidth packages (docs/bandwidth.md,
// "Packages"). Rates take human units (100M, 1.5G, 10Mbit: decimal, bits
// per second, model.ParseBitRate); the API and documents take integers in
// bit/s. add-eip, set-eip, remove-eip and set read the package, change it
// and write it back whole (as `eip limits` does).
func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "bandwidth", Aliases: []string{"bw"}, Short: "Bandwidth packages: a capacity shared by EIPs in any AZ (min, max and weight per EIP)"}
		c.AddCommand(bandwidthCreateCommand(), bandwidthSetCommand(), bandwidthAddEIPCommand(), bandwidthSetEIPCommand(), bandwidthRemoveEIPCommand())
		c.AddCommand(objectCommands(model.KindBandwidthPackage, describeBandwidthPackage, bandwidthTable)...)
		return c
	})
}

// rateFlag parses a rate flag's value; errors name the flag.
func rateFlag(flag, v string) (uint64, error) {
	r, err := model.ParseBitRate(v)
	if err != nil {
		return 0, fmt.Errorf("--%s: %w", flag, err)
	}
	return r, nil
}

// burstFlag parses --burst.
func burstFlag(v string) (model.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--burst %q: want a duration such as 20ms", v)
	}
	return model.Duration(d), nil
}

// weightFlag parses an EIP's weight; errors start with what.
func weightFlag(what, v string) (*uint32, error) {
	w, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%s %q is not a number (1-%d)", what, v, model.MaxBandwidthWeight)
	}
	w32 := uint32(w)
	return &w32, nil
}

func bandwidthCreateCommand() *cobra.Command {
	var (
		capacity, burst, desc string
		eips                  []string
		replace               bool
	)
	create := &cobra.Command{
		Use:   "create NAME --capacity RATE [--burst DURATION] [--eip ADDRESS[,min=RATE][,max=RATE][,weight=N]]...",
		Short: "Create a bandwidth package",
		Example: `  azgate bandwidth create shop --capacity 100M \
      --eip 198.51.100.7,min=20M,weight=2 --eip 198.51.100.8,max=50M --eip 198.51.100.9`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := &model.BandwidthPackage{Name: args[0], Description: desc}
			var err error
			if p.Capacity, err = rateFlag("capacity", capacity); err != nil {
				return err
			}
			if burst != "" {
				if p.Burst, err = burstFlag(burst); err != nil {
					return err
				}
			}
			for _, spec := range eips {
				e, err := parsePackageEIP(spec)
				if err != nil {
					return err
				}
				p.EIPs = append(p.EIPs, e)
			}
			if es := p.Validate(); len(es) > 0 {
				return fmt.Errorf("invalid bandwidth package %q: %w", p.Name, es)
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			var res client.Result
			if replace {
				res, err = cl.Put(cmd.Context(), p)
			} else {
				res, err = cl.Create(cmd.Context(), p)
			}
			if err != nil {
				return err
			}
			return writeResult(cmd, "bandwidth package "+p.Name, res, p)
		},
	}
	f := create.Flags()
	f.StringVar(&capacity, "capacity", "", "the package's capacity in bits per second: 100M, 1.5G, 10Mbit (decimal)")
	f.StringVar(&burst, "burst", "", "how long a token bucket may burst at its rate: 20ms (the default) up to 10s")
	f.StringVar(&desc, "description", "", "free text")
	f.StringArrayVar(&eips, "eip", nil, "ADDRESS[,min=RATE][,max=RATE][,weight=N]: an EIP sharing the package (repeatable)")
	f.BoolVar(&replace, "replace", false, "replace the package if it exists (PUT) instead of failing")
	create.MarkFlagRequired("capacity")
	return create
}

// parsePackageEIP parses --eip ADDRESS[,min=RATE][,max=RATE][,weight=N].
func parsePackageEIP(spec string) (model.PackageEIP, error) {
	var e model.PackageEIP
	a, rest, hasRest := strings.Cut(spec, ",")
	addr, err := netip.ParseAddr(a)
	if err != nil {
		return e, fmt.Errorf("--eip %q: %q is not an IP address (want ADDRESS[,min=RATE][,max=RATE][,weight=N])", spec, a)
	}
	e.Address = addr
	if !hasRest {
		return e, nil
	}
	kv, err := keyValues("eip", rest, "min", "max", "weight")
	if err != nil {
		return e, err
	}
	if v, ok := kv["min"]; ok {
		if e.Min, err = rateFlag("eip "+a+" min", v); err != nil {
			return e, err
		}
	}
	if v, ok := kv["max"]; ok {
		if e.Max, err = rateFlag("eip "+a+" max", v); err != nil {
			return e, err
		}
	}
	if v, ok := kv["weight"]; ok {
		if e.Weight, err = weightFlag(fmt.Sprintf("--eip %q: weight", spec), v); err != nil {
			return e, err
		}
	}
	return e, nil
}

// editPackage reads a package, lets edit change it and writes it back
// unless someone changed it meanwhile (client.Edit: edit runs again on
// the new version).
func editPackage(cmd *cobra.Command, name string, edit func(*model.BandwidthPackage) (string, error)) error {
	cl, err := apiClient()
	if err != nil {
		return err
	}
	var what string
	res, o, err := cl.Edit(cmd.Context(), model.KindBandwidthPackage, name, func(o model.Object) (err error) {
		what, err = edit(o.(*model.BandwidthPackage))
		return err
	})
	if err != nil {
		return err
	}
	return writeResult(cmd, "bandwidth package "+name+" ("+what+")", res, o)
}

// eipFlags are the per-EIP flags of add-eip and set-eip.
type eipFlags struct{ min, max, weight string }

func (f *eipFlags) add(c *cobra.Command, clearing string) {
	c.Flags().StringVar(&f.min, "min", "", "guaranteed rate: 10M, 500k ("+clearing+")")
	c.Flags().StringVar(&f.max, "max", "", "cap: 50M, 1G ("+clearing+")")
	c.Flags().StringVar(&f.weight, "weight", "", "share of the spare capacity relative to the package's other EIPs, 1-10000 (default 1)")
}

// apply sets the flags given on e.
func (f *eipFlags) apply(cmd *cobra.Command, e *model.PackageEIP) error {
	var err error
	if cmd.Flags().Changed("min") {
		if e.Min, err = rateFlag("min", f.min); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("max") {
		if e.Max, err = rateFlag("max", f.max); err != nil {
			return err
		}
	}
	if cmd.Flags().Changed("weight") {
		if e.Weight, err = weightFlag("--weight", f.weight); err != nil {
			return err
		}
	}
	return nil
}

func bandwidthAddEIPCommand() *cobra.Command {
	var f eipFlags
	c := &cobra.Command{
		Use:   "add-eip NAME ADDRESS [--min RATE] [--max RATE] [--weight N]",
		Short: "Add an EIP to a package (an EIP belongs to at most one package)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseAddr("EIP address", args[1])
			if err != nil {
				return err
			}
			return editPackage(cmd, args[0], func(p *model.BandwidthPackage) (string, error) {
				if _, ok := p.EIP(a); ok {
					return "", fmt.Errorf("bandwidth package %s already has EIP %v (azgate bandwidth set-eip changes its figures)", p.Name, a)
				}
				e := model.PackageEIP{Address: a}
				if err := f.apply(cmd, &e); err != nil {
					return "", err
				}
				p.EIPs = append(p.EIPs, e)
				return "EIP " + a.String() + " added", nil
			})
		},
	}
	f.add(c, "default none")
	return c
}

func bandwidthSetEIPCommand() *cobra.Command {
	var f eipFlags
	c := &cobra.Command{
		Use:   "set-eip NAME ADDRESS [--min RATE] [--max RATE] [--weight N]",
		Short: "Change an EIP's min, max or weight in its package (0 clears a min or a max)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseAddr("EIP address", args[1])
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("min") && !cmd.Flags().Changed("max") && !cmd.Flags().Changed("weight") {
				return fmt.Errorf("give at least one of --min, --max, --weight")
			}
			return editPackage(cmd, args[0], func(p *model.BandwidthPackage) (string, error) {
				for i := range p.EIPs {
					if p.EIPs[i].Address == a {
						return "EIP " + a.String() + " changed", f.apply(cmd, &p.EIPs[i])
					}
				}
				return "", fmt.Errorf("bandwidth package %s has no EIP %v (azgate bandwidth add-eip adds it)", p.Name, a)
			})
		},
	}
	f.add(c, "0 clears it")
	return c
}

func bandwidthRemoveEIPCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove-eip NAME ADDRESS",
		Short: "Take an EIP out of a package (its share goes to the others)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseAddr("EIP address", args[1])
			if err != nil {
				return err
			}
			return editPackage(cmd, args[0], func(p *model.BandwidthPackage) (string, error) {
				for i := range p.EIPs {
					if p.EIPs[i].Address == a {
						p.EIPs = append(p.EIPs[:i], p.EIPs[i+1:]...)
						return "EIP " + a.String() + " removed", nil
					}
				}
				return "", fmt.Errorf("bandwidth package %s has no EIP %v", p.Name, a)
			})
		},
	}
}

func bandwidthSetCommand() *cobra.Command {
	var capacity, burst, desc string
	c := &cobra.Command{
		Use:   "set NAME [--capacity RATE] [--burst DURATION] [--description D]",
		Short: "Change a package's capacity, burst or description",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			if !fl.Changed("capacity") && !fl.Changed("burst") && !fl.Changed("description") {
				return fmt.Errorf("give at least one of --capacity, --burst, --description")
			}
			return editPackage(cmd, args[0], func(p *model.BandwidthPackage) (string, error) {
				var err error
				if fl.Changed("capacity") {
					if p.Capacity, err = rateFlag("capacity", capacity); err != nil {
						return "", err
					}
				}
				if fl.Changed("burst") {
					if p.Burst, err = burstFlag(burst); err != nil {
						return "", err
					}
				}
				if fl.Changed("description") {
					p.Description = desc
				}
				return "settings", nil
			})
		},
	}
	c.Flags().StringVar(&capacity, "capacity", "", "the package's capacity: 100M, 1.5G, 10Mbit")
	c.Flags().StringVar(&burst, "burst", "", "token bucket burst as a time of the rate: 20ms up to 10s (0s: the default)")
	c.Flags().StringVar(&desc, "description", "", "free text")
	return c
}

func rateOrDash(v uint64) string {
	if v == 0 {
		return "-"
	}
	return model.FormatBitRate(v)
}

func describeBandwidthPackage(w io.Writer, o model.Object) {
	p := o.(*model.BandwidthPackage)
	tw := newTable(w)
	row(tw, "name:", p.Name)
	row(tw, "capacity:", fmt.Sprintf("%s (%d bit/s)", model.FormatBitRate(p.Capacity), p.Capacity))
	row(tw, "burst:", p.BurstTime())
	row(tw, "guaranteed:", fmt.Sprintf("%s of the capacity in mins", model.FormatBitRate(p.MinSum())))
	row(tw, "description:", p.Description)
	tw.Flush()
	if len(p.EIPs) == 0 {
		fmt.Fprintln(w, "(no EIPs)")
		return
	}
	fmt.Fprintln(w)
	tw = newTable(w, "EIP", "MIN", "MAX", "WEIGHT")
	for _, e := range p.EIPs {
		row(tw, e.Address, rateOrDash(e.Min), rateOrDash(e.Max), e.W())
	}
	tw.Flush()
}

func bandwidthTable(w io.Writer, objs []model.Object) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key() < objs[j].Key() })
	tw := newTable(w, "NAME", "CAPACITY", "BURST", "EIPS", "GUARANTEED", "DESCRIPTION")
	for _, o := range objs {
		p := o.(*model.BandwidthPackage)
		row(tw, p.Name, model.FormatBitRate(p.Capacity), p.BurstTime(), len(p.EIPs), model.FormatBitRate(p.MinSum()), p.Description)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no bandwidth packages)")
	}
}
