//go:build !node

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "eip", Short: "Elastic IPs: public addresses bound to guests on AZ hosts"}
		var desc string
		create := &cobra.Command{
			Use:   "create ADDRESS [--description D]",
			Short: "Create an (unbound) EIP inside a prefix of an edge set",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				a, err := parseAddr("EIP address", args[0])
				if err != nil {
					return err
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				e := &model.EIP{Address: a, Description: desc}
				res, err := cl.Create(cmd.Context(), e)
				if err != nil {
					return err
				}
				return writeResult(cmd, "EIP "+e.Key(), res, e)
			},
		}
		create.Flags().StringVar(&desc, "description", "", "free text")
		var host, guest string
		bind := &cobra.Command{
			Use:   "bind ADDRESS --host HOST --guest GUEST",
			Short: "Bind an EIP to a guest (moving it if it is bound elsewhere)",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.BindEIP(cmd.Context(), args[0], host, guest)
				if err != nil {
					return err
				}
				return writeEIP(cmd, args[0], res)
			},
		}
		bind.Flags().StringVar(&host, "host", "", "host of the guest")
		bind.Flags().StringVar(&guest, "guest", "", "guest to bind to")
		bind.MarkFlagRequired("host")
		bind.MarkFlagRequired("guest")
		unbind := &cobra.Command{
			Use:   "unbind ADDRESS",
			Short: "Remove an EIP's binding",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.UnbindEIP(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return writeEIP(cmd, args[0], res)
			},
		}
		var sel struct{ set, host, prefix string }
		deleteMatching := &cobra.Command{
			Use:   "delete-matching [--set SET] [--host HOST] [--prefix PREFIX]",
			Short: "Delete every EIP a selector picks, all or nothing (more than 100: --force)",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.DeleteEIPs(cmd.Context(), sel.set, sel.host, sel.prefix)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if globals.json {
					if err := printJSON(out, res); err != nil {
						return err
					}
					return dryRunOutcome(res.Refusals)
				}
				printWarnings(cmd, res.Warnings)
				if len(res.Objects) <= summaryAbove {
					done := "deleted"
					if res.DryRun {
						done = "would be deleted"
					}
					for _, o := range res.Objects {
						fmt.Fprintf(out, "EIP %s %s\n", o.Key, done)
					}
				}
				if err := applySummary(out, res); err != nil {
					return err
				}
				return dryRunOutcome(res.Refusals)
			},
		}
		df := deleteMatching.Flags()
		df.StringVar(&sel.set, "set", "", "the EIPs this edge set serves")
		df.StringVar(&sel.host, "host", "", "the EIPs bound to guests of this host")
		df.StringVar(&sel.prefix, "prefix", "", "the EIPs inside this prefix")
		deleteMatching.MarkFlagsOneRequired("set", "host", "prefix")
		c.AddCommand(create, bind, unbind, deleteMatching)
		c.AddCommand(pullOutCommands(model.KindEIP)...)
		c.AddCommand(limitsCommand(model.KindEIP))
		c.AddCommand(objectCommands(model.KindEIP, describeEIP, eipTable)...)
		return c
	})
}

// writeEIP reports a bind or unbind with the EIP as now stored.
func writeEIP(cmd *cobra.Command, addr string, res client.Result) error {
	var e model.EIP
	if err := json.Unmarshal(res.Object, &e); err != nil {
		return fmt.Errorf("EIP %s: decoding the stored EIP: %w", addr, err)
	}
	if globals.json {
		return writeResult(cmd, "", res, &e)
	}
	to := "unbound"
	if e.Binding != nil {
		to = "bound to " + e.Binding.Host + "/" + e.Binding.Guest
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "EIP %s %s: %s (revision %d)\n", addr, res.Action, to, res.Revision)
	return err
}

func describeEIP(w io.Writer, o model.Object) {
	e := o.(*model.EIP)
	tw := newTable(w)
	row(tw, "address:", e.Address)
	row(tw, "description:", e.Description)
	if e.Binding != nil {
		row(tw, "bound to:", e.Binding.Host+"/"+e.Binding.Guest)
	} else {
		row(tw, "bound to:", "(unbound)")
	}
	if e.Set != "" {
		row(tw, "pulled out into:", e.Set)
	}
	if e.Limits != nil {
		row(tw, "rate limits:", limitsText(e.Limits))
	}
	tw.Flush()
}

func eipTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "ADDRESS", "HOST", "GUEST", "DESCRIPTION")
	for _, o := range objs {
		e := o.(*model.EIP)
		var host, guest string
		if e.Binding != nil {
			host, guest = e.Binding.Host, e.Binding.Guest
		}
		row(tw, e.Address, host, guest, e.Description)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no EIPs)")
	}
}
