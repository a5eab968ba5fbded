// Package sdnotify tells systemd a service's state (sd_notify(3)): a
// unit of Type=notify is "started" only once its process says READY=1,
// so systemd (and what is ordered after the unit) knows a role that is
// ready from one that is merely running. The protocol is one datagram
// per state change to the unix socket named by $NOTIFY_SOCKET; a name
// starting with '@' is in the abstract namespace. Without the variable
// (not under systemd, or Type=simple) every call does nothing.
package sdnotify

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"
)

// The states the roles send.
const (
	Ready    = "READY=1"
	Stopping = "STOPPING=1"
)

// Notify sends state (lines "KEY=VALUE") to $NOTIFY_SOCKET. It reports
// whether the variable was set; an error is a socket that could not be
// reached, which the caller logs (the service runs on regardless).
func Notify(state string) (bool, error) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return false, nil
	}
	if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
		return true, fmt.Errorf("NOTIFY_SOCKET %q: not a unix socket path or @abstract name", addr)
	}
	// Go's net package maps a leading '@' to the abstract namespace's
	// leading NUL byte itself.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return true, fmt.Errorf("NOTIFY_SOCKET %s: %w", addr, err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(time.Second)) // a datagram socket never blocks long; bound it anyway
	if _, err := c.Write([]byte(state)); err != nil {
		return true, fmt.Errorf("NOTIFY_SOCKET %s: %w", addr, err)
	}
	return true, nil
}

// Tell sends state and logs a socket that could not be reached (a unit
// of Type=notify then times out: the log says why).
func Tell(log *slog.Logger, state string) {
	if set, err := Notify(state); err != nil {
		log.Warn("cannot tell systemd", "state", state, "err", err)
	} else if set {
		log.Debug("told systemd", "state", state)
	}
}
