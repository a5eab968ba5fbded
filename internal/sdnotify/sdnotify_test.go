package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a real unixgram socket as systemd does and returns what
// NOTIFY_SOCKET names it by and a function that reads one datagram.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func() string {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 4096)
		n, err := c.Read(b)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(b[:n])
	}
}

// TestNotify: READY=1 and STOPPING=1 arrive as datagrams on a path socket
// and on an abstract ('@') one; without NOTIFY_SOCKET nothing is sent.
func TestNotify(t *testing.T) {
	for _, c := range []struct{ name, addr string }{
		{"path", filepath.Join(t.TempDir(), "notify")},
		{"abstract", fmt.Sprintf("@azgate-sdnotify-test-%d", os.Getpid())},
	} {
		t.Run(c.name, func(t *testing.T) {
			read := listen(t, c.addr)
			t.Setenv("NOTIFY_SOCKET", c.addr)
			for _, st := range []string{Ready, Stopping} {
				if set, err := Notify(st); !set || err != nil {
					t.Fatalf("Notify(%s) = %v, %v", st, set, err)
				}
				if got := read(); got != st {
					t.Fatalf("got %q, want %q", got, st)
				}
			}
		})
	}
	t.Run("unset", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", "")
		if set, err := Notify(Ready); set || err != nil {
			t.Fatalf("Notify without NOTIFY_SOCKET = %v, %v", set, err)
		}
	})
	t.Run("gone", func(t *testing.T) {
		t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "none"))
		if set, err := Notify(Ready); !set || err == nil {
			t.Fatalf("Notify to a missing socket = %v, %v, want an error", set, err)
		}
	})
}
