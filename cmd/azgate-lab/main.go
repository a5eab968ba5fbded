// Command azgate-lab is the lab and the benchmarks: a region (or three
// GSLB regions) on one machine in network namespaces, and the benchmark
// suites. It is not shipped to nodes: the lab runs the shipped azgate
// binary for every role (--azgate, default: azgate beside azgate-lab),
// and azgate itself links none of this (cmd/azgate's TestShippedDeps).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "azgate-lab:", err)
		os.Exit(1)
	}
}

// globals are the flags every subcommand shares.
var globals struct {
	json   bool
	azgate string
}

// newRoot builds the command tree; tests run it in-process.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "azgate-lab",
		Short:         "azgate-lab: the azgate lab and benchmarks (runs the azgate binary for every role)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	f := root.PersistentFlags()
	f.BoolVar(&globals.json, "json", false, "print JSON instead of tables")
	f.StringVar(&globals.azgate, "azgate", "", "the azgate binary the lab's roles run as (default: azgate in azgate-lab's directory); the edges and agents run azgate-node beside it, as their units do")
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// commands are registered by each subcommand's file in init().
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}
