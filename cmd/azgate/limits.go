//go:build !node

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

// limitsCommand: `eip|service limits KEY --source-pps N --syn-rate N ...`
// sets an EIP's or a VIP's rate limits at the edges (docs/dataplane.md,
// "Rate limits"); --clear removes them.
func limitsCommand(kind string) *cobra.Command {
	what := model.Singular(kind)
	key := "NAME"
	if kind == model.KindEIP {
		key = "ADDRESS"
	}
	var l model.Limits
	var clearAll bool
	c := &cobra.Command{
		Use:   "limits " + key + " [--source-pps N] [--source-burst N] [--syn-rate N] [--syn-burst N] [--clear]",
		Short: fmt.Sprintf("Set the %s's rate limits at the edges: packets per second per source, SYNs per second in all", what),
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if clearAll == (l != model.Limits{}) {
				return fmt.Errorf("give --clear or at least one of --source-pps, --source-burst, --syn-rate, --syn-burst")
			}
			cl, err := apiClient()
			if err != nil {
				return err
			}
			var lp *model.Limits
			if !clearAll {
				lp = &l
			}
			res, o, err := cl.Edit(cmd.Context(), kind, args[0], func(o model.Object) error {
				switch v := o.(type) {
				case *model.EIP:
					v.Limits = lp
				case *model.Service:
					v.Limits = lp
				}
				return nil
			})
			if err != nil {
				return err
			}
			msg := what + " " + o.Key() + ": rate limits " + limitsText(lp)
			return writeResult(cmd, msg, res, o)
		},
	}
	c.Flags().Uint32Var(&l.SourcePPS, "source-pps", 0, "packets per second from any one source (0: no per-source limit)")
	c.Flags().Uint32Var(&l.SourceBurst, "source-burst", 0, "per-source burst (default: one second's worth)")
	c.Flags().Uint32Var(&l.SYNRate, "syn-rate", 0, "TCP SYNs per second to the address from all sources (0: no SYN guard)")
	c.Flags().Uint32Var(&l.SYNBurst, "syn-burst", 0, "SYN burst (default: one second's worth)")
	c.Flags().BoolVar(&clearAll, "clear", false, "remove the limits")
	return c
}

// limitsText says what limits are in force, for describe and results.
func limitsText(l *model.Limits) string {
	if l == nil {
		return "none"
	}
	s := ""
	if l.SourcePPS > 0 {
		s = fmt.Sprintf("%d pps per source (burst %d)", l.SourcePPS, orRate(l.SourceBurst, l.SourcePPS))
	}
	if l.SYNRate > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d SYN/s (burst %d)", l.SYNRate, orRate(l.SYNBurst, l.SYNRate))
	}
	if s == "" {
		return "none"
	}
	return s
}

func orRate(burst, rate uint32) uint32 {
	if burst == 0 {
		return rate
	}
	return burst
}
