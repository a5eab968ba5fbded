// Command azgate is the whole system in one binary: the roles (controller,
// edge, agent, ...) and the CLI nouns that talk to the controller's API.
// main only wires flags to packages. The lab and the benchmarks are
// cmd/azgate-lab: this binary, shipped to the nodes, links none of their
// code nor any test helper (TestShippedDeps).
package main

import (
	"os"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	os.Exit(execute(newRoot(), os.Args[1:], os.Stdout, os.Stderr))
}

// newRoot builds the command tree; tests run it in-process.
func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           rootName,
		Short:         rootShort,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	addGlobalFlags(root)
	for _, add := range commands {
		root.AddCommand(add())
	}
	guardGroups(root)
	return root
}

// commands are registered by each noun's file in init().
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }
