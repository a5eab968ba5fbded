// azgate-fleetnode is the fleet bench's child process (azgate-lab bench
// fleet starts it, one process a node): `azgate-fleetnode fleet-edge`
// runs one edge Reconciler on the data-plane fakes following its set's
// share, `azgate-fleetnode fleet-agent` one agent following its host's
// (package internal/bench/fleetnode: their flags and their protocol,
// JSON events on stdout, commands on stdin, exit when stdin ends).
//
// It is a binary of its own so that a child's memory is a node's: it
// links the edge and agent roles' code, the store's client and the
// fakes, and none of azgate-lab's lab, controller, etcd server or
// benchmark suites (TestFleetNodeDeps), whose file pages would otherwise
// count in every child's RSS. It is not shipped: make build puts it in
// bin/ beside azgate-lab, which looks for it there.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/azgate/azgate/internal/bench/fleetnode"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := fleetnode.Main(ctx, os.Args[1:], os.Stdin, os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "azgate-fleetnode:", err)
		os.Exit(1)
	}
}
