//go:build !node

package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "host", Short: "AZ hosts (running the agent) and their guests"}
		var az, underlay string
		var guests []string
		create := &cobra.Command{
			Use:   "create NAME --az AZ --underlay ADDR [--guest name=g1,address=198.19.21.1,vsid=5001 ...]",
			Short: "Create a host",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				h := &model.Host{Name: args[0], AZ: az}
				var err error
				if h.Underlay, err = parseAddr("--underlay", underlay); err != nil {
					return err
				}
				for _, g := range guests {
					guest, err := parseGuest(g)
					if err != nil {
						return err
					}
					h.Guests = append(h.Guests, guest)
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.Create(cmd.Context(), h)
				if err != nil {
					return err
				}
				return writeResult(cmd, "host "+h.Name, res, h)
			},
		}
		create.Flags().StringVar(&az, "az", "", "the host's AZ")
		create.Flags().StringVar(&underlay, "underlay", "", "the host's underlay address (where the edge sends NVGRE)")
		create.Flags().StringArrayVar(&guests, "guest", nil, "a guest: name=NAME,address=ADDR[,address6=ADDR6],vsid=VSID (repeatable; address6: its private IPv6 address, fd00::/8 or global unicast)")
		create.MarkFlagRequired("az")
		create.MarkFlagRequired("underlay")
		c.AddCommand(create, guestCommand())
		c.AddCommand(objectCommands(model.KindHost, describeHost, hostTable)...)
		return c
	})
}

func guestCommand() *cobra.Command {
	c := &cobra.Command{Use: "guest", Short: "Add or remove a host's guests"}
	var name, address, address6 string
	var vsid uint32
	add := &cobra.Command{
		Use:   "add HOST --name NAME --address ADDR [--address6 ADDR6] --vsid VSID",
		Short: "Add a guest to a host",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			g := model.Guest{Name: name, VSID: vsid}
			var err error
			if g.Address, err = parseAddr("--address", address); err != nil {
				return err
			}
			if address6 != "" {
				if g.Address6, err = parseAddr("--address6", address6); err != nil {
					return err
				}
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, err := cl.AddGuest(cmd.Context(), args[0], g)
			if err != nil {
				return err
			}
			return writeResult(cmd, "host "+args[0], res, nil)
		},
	}
	add.Flags().StringVar(&name, "name", "", "guest name")
	add.Flags().StringVar(&address, "address", "", "guest's private address")
	add.Flags().StringVar(&address6, "address6", "", "guest's private IPv6 address (fd00::/8 or global unicast), what an IPv6 EIP bound to it is translated to")
	add.Flags().Uint32Var(&vsid, "vsid", 0, fmt.Sprintf("virtual subnet ID (%d-%d)", model.VSIDMin, model.VSIDMax))
	add.MarkFlagRequired("name")
	add.MarkFlagRequired("address")
	add.MarkFlagRequired("vsid")
	remove := &cobra.Command{
		Use:     "remove HOST NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a guest (refused while an EIP is bound to it)",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := apiClient()
			if err != nil {
				return err
			}
			res, err := cl.RemoveGuest(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			return writeResult(cmd, "host "+args[0], res, nil)
		},
	}
	c.AddCommand(add, remove)
	return c
}

// parseGuest parses --guest name=g1,address=198.19.21.1,vsid=5001 (and
// an optional address6=2001:db8::1).
func parseGuest(v string) (model.Guest, error) {
	kv, err := keyValues("guest", v, "name", "address", "address6", "vsid")
	if err != nil {
		return model.Guest{}, err
	}
	g := model.Guest{Name: kv["name"]}
	if g.Address, err = parseAddr(fmt.Sprintf("--guest %q: address", v), kv["address"]); err != nil {
		return g, err
	}
	if a6, ok := kv["address6"]; ok {
		if g.Address6, err = parseAddr(fmt.Sprintf("--guest %q: address6", v), a6); err != nil {
			return g, err
		}
	}
	n, err := strconv.ParseUint(kv["vsid"], 10, 32)
	if err != nil {
		return g, fmt.Errorf("--guest %q: vsid %q is not a number", v, kv["vsid"])
	}
	g.VSID = uint32(n)
	return g, nil
}

func describeHost(w io.Writer, o model.Object) {
	h := o.(*model.Host)
	tw := newTable(w)
	row(tw, "name:", h.Name)
	row(tw, "az:", h.AZ)
	row(tw, "underlay:", h.Underlay)
	tw.Flush()
	if len(h.Guests) == 0 {
		fmt.Fprintln(w, "guests: none")
		return
	}
	fmt.Fprintln(w, "guests:")
	if !slices.ContainsFunc(h.Guests, func(g model.Guest) bool { return g.Address6.IsValid() }) {
		tw = newTable(w, "  NAME", "ADDRESS", "VSID")
		for _, g := range h.Guests {
			row(tw, "  "+g.Name, g.Address, g.VSID)
		}
		tw.Flush()
		return
	}
	tw = newTable(w, "  NAME", "ADDRESS", "ADDRESS6", "VSID")
	for _, g := range h.Guests {
		a6 := "-"
		if g.Address6.IsValid() {
			a6 = g.Address6.String()
		}
		row(tw, "  "+g.Name, g.Address, a6, g.VSID)
	}
	tw.Flush()
}

func hostTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "AZ", "UNDERLAY", "GUESTS")
	for _, o := range objs {
		h := o.(*model.Host)
		names := make([]string, len(h.Guests))
		for i, g := range h.Guests {
			names[i] = g.Name
		}
		row(tw, h.Name, h.AZ, h.Underlay, strings.Join(names, ","))
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no hosts)")
	}
}
