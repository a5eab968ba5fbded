//go:build !node

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// pullOutCommands: `eip|service pullout KEY --set SET` and `... return KEY`
// move an EIP's or a VIP's /32 into a dedicated set and back.
func pullOutCommands(kind string) []*cobra.Command {
	what := model.Singular(kind)
	key := "NAME"
	if kind == model.KindEIP {
		key = "ADDRESS"
	}
	move := func(ctx context.Context, k, set string) (client.Result, model.Object, error) {
		cl, err := apiClient()
		if err != nil {
			return client.Result{}, nil, err
		}
		return cl.Edit(ctx, kind, k, func(o model.Object) error {
			switch v := o.(type) {
			case *model.EIP:
				v.Set = set
			case *model.Service:
				v.Set = set
			}
			return nil
		})
	}
	var set string
	pull := &cobra.Command{
		Use:   "pullout " + key + " --set SET",
		Short: fmt.Sprintf("Pull the %s's /32 out into a dedicated edge set (its edges announce it; the longest prefix wins)", what),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, o, err := move(cmd.Context(), args[0], set)
			if err != nil {
				return err
			}
			return writeResult(cmd, what+" "+o.Key()+" pulled out into "+set, res, o)
		},
	}
	pull.Flags().StringVar(&set, "set", "", "the dedicated set")
	pull.MarkFlagRequired("set")
	ret := &cobra.Command{
		Use:   "return " + key,
		Short: fmt.Sprintf("Return the %s to the prefix set that covers it", what),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, o, err := move(cmd.Context(), args[0], "")
			if err != nil {
				return err
			}
			return writeResult(cmd, what+" "+o.Key()+" returned to its prefix set", res, o)
		},
	}
	return []*cobra.Command{pull, ret}
}

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "quarantine", Short: "Quarantine: an EIP or VIP served by the region's quarantine set only"}
		var reason string
		add := &cobra.Command{
			Use:   "add ADDRESS [--reason TEXT]",
			Short: "Move an EIP or a VIP to the quarantine set",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				a, err := parseAddr("address", args[0])
				if err != nil {
					return err
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				q := &model.Quarantine{Address: a, Reason: reason, By: "operator"}
				res, err := cl.Put(cmd.Context(), q)
				if err != nil {
					return err
				}
				return writeResult(cmd, "quarantine "+q.Key(), res, q)
			},
		}
		add.Flags().StringVar(&reason, "reason", "", "why (free text)")
		release := &cobra.Command{
			Use:   "release ADDRESS",
			Short: "Release a quarantined address back to its set",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.Delete(cmd.Context(), model.KindQuarantine, args[0])
				if err != nil {
					return err
				}
				return writeResult(cmd, "quarantine "+args[0]+" released", res, nil)
			},
		}
		c.AddCommand(add, release)
		for _, sc := range objectCommands(model.KindQuarantine, describeQuarantine, quarantineTable) {
			if sc.Name() != "delete" { // release says it better
				c.AddCommand(sc)
			}
		}
		return c
	})
}

func describeQuarantine(w io.Writer, o model.Object) {
	q := o.(*model.Quarantine)
	tw := newTable(w)
	row(tw, "address:", q.Address)
	row(tw, "by:", q.By)
	row(tw, "reason:", q.Reason)
	tw.Flush()
}

func quarantineTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "ADDRESS", "BY", "REASON")
	for _, o := range objs {
		q := o.(*model.Quarantine)
		row(tw, q.Address, q.By, q.Reason)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no quarantined addresses)")
	}
}
