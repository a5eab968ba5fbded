//go:build !node

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

// edgeAdminCommands are the operator's commands on one edge, under the
// edge role's command: azgate edge drain|undrain NAME.
func edgeAdminCommands() []*cobra.Command {
	mk := func(use, short string, drained bool) *cobra.Command {
		return &cobra.Command{
			Use:   use + " NAME",
			Short: short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				set, err := setOfEdge(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				res, s, err := editSet(cmd.Context(), set, func(s *model.EdgeSet) error {
					for i := range s.Edges {
						if s.Edges[i].Name == args[0] {
							s.Edges[i].Drained = drained
							return nil
						}
					}
					return fmt.Errorf("edge %s left set %s meanwhile: try again", args[0], s.Name)
				})
				if err != nil {
					return err
				}
				what := "edge " + args[0] + " in set " + s.Name
				if err := writeResult(cmd, what, res, s); err != nil {
					return err
				}
				if !globals.json {
					if drained {
						fmt.Fprintln(cmd.OutOrStdout(), "it withdraws its routes and keeps forwarding what still arrives (azgate status shows it)")
					} else {
						fmt.Fprintln(cmd.OutOrStdout(), "it announces again once every condition holds (azgate status shows it)")
					}
				}
				return nil
			},
		}
	}
	return []*cobra.Command{
		mk("drain", "Drain an edge: it withdraws its BGP routes (upstream ECMP stops sending to it) but keeps forwarding", true),
		mk("undrain", "Undrain an edge: it announces its set's routes again once it is well", false),
	}
}

// setOfEdge finds the set holding an edge.
func setOfEdge(ctx context.Context, edge string) (string, error) {
	cl, err := apiClient()
	if err != nil {
		return "", err
	}
	sets, err := cl.EdgeSets(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range sets {
		for _, e := range s.Edges {
			if e.Name == edge {
				return s.Name, nil
			}
		}
	}
	return "", fmt.Errorf("edge %q is in no edge set (azgate set list)", edge)
}
