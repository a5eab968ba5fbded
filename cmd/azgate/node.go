//go:build node

// azgate-node (go build -tags node): the node roles only, edge and agent,
// and the node-local commands (dataplane-reset, monitor, capture). The
// files of the controller, the other roles and the CLI nouns carry
// //go:build !node, so this binary links neither the embedded etcd
// server, GoBGP, miekg/dns, redis nor the controller (TestNodeDeps): its
// file pages at rest are what the edge and the agent need (docs/scale.md).
// Its commands are the same source as azgate's: no copy.
package main

import "github.com/spf13/cobra"

const (
	rootName  = "azgate-node"
	rootShort = "azgate-node: the edge and agent roles of azgate, and their node-local commands"
)

// globals: the node binary has no CLI noun; --json shapes its errors only.
var globals struct {
	json bool
}

func addGlobalFlags(root *cobra.Command) {
	root.PersistentFlags().BoolVar(&globals.json, "json", false, "print errors as JSON")
}

// edgeAdminCommands: azgate edge drain|undrain talk to the controller's
// API; they are azgate's, not azgate-node's.
func edgeAdminCommands() []*cobra.Command { return nil }
