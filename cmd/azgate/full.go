//go:build !node

package main

// The full binary: every role and every CLI noun (node.go is the node
// binary's counterpart, built with -tags node).
const (
	rootName  = "azgate"
	rootShort = "azgate: software edge gateway for multi-AZ clouds"
)
