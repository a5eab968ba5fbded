//go:build node && fleetnode

// azgate-fleetnode (go build -tags node,fleetnode): azgate-node's code
// plus the fleet bench's two child commands, `fleet-edge` and
// `fleet-agent` (package internal/bench/fleetnode: one edge or agent on
// the data-plane fakes following its share, JSON events on stdout,
// commands on stdin, exit when stdin ends). azgate-lab bench fleet runs
// its edge and agent processes with it, so that their memory is that of
// a process of the node binary: the same linked code, plus the children
// and the fakes (TestFleetNodeDeps). Not shipped: make build puts it in
// bin/ beside azgate-lab; azgate and azgate-node are built without this
// file (TestShippedDeps, TestNodeDeps).
package main

import (
	"github.com/azgate/azgate/internal/bench/fleetnode"
	"github.com/spf13/cobra"
)

func init() {
	for _, c := range fleetnode.Children {
		register(func() *cobra.Command {
			return &cobra.Command{
				Use:                c.Arg,
				Short:              c.Short,
				Hidden:             true,
				DisableFlagParsing: true, // c.Main parses them
				RunE: func(cmd *cobra.Command, args []string) error {
					ctx, cancel := signalContext()
					defer cancel()
					return c.Main(ctx, args, cmd.InOrStdin(), cmd.OutOrStdout())
				},
			}
		})
	}
}
