//go:build !node

package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

func TestCheckListens(t *testing.T) {
	for _, ok := range [][]string{
		{"127.0.0.1:53"},
		{"127.0.0.1:53", "[::1]:53"},
		{"192.0.2.53:53", "[2001:db8::53]:53"},
		{"0.0.0.0:53", "[2001:db8::53]:53"},
		{"[::]:53", "127.0.0.1:54"},
		{"127.0.0.1:0", "[::]:0"},
	} {
		if err := checkListens("--listen", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		addrs []string
		err   string
	}{
		{nil, "--listen: at least one address"},
		{[]string{"127.0.0.1"}, `--listen "127.0.0.1": address 127.0.0.1: missing port`},
		{[]string{"[::1]:53", "[::1]:53"}, `--listen "[::1]:53": given twice`},
		{[]string{"[::]:53", "127.0.0.1:53"}, `--listen "[::]:53" and "127.0.0.1:53": a wildcard takes every address of its port in its family ([::]:53 alone serves both families)`},
		{[]string{"0.0.0.0:53", "[::]:53"}, `--listen "0.0.0.0:53" and "[::]:53"`},
		{[]string{"[::1]:53", ":53"}, `--listen "[::1]:53" and ":53"`},
		{[]string{"192.0.2.53:53", "0.0.0.0:53"}, `--listen "192.0.2.53:53" and "0.0.0.0:53"`},
	} {
		if err := checkListens("--listen", tc.addrs); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want %q", tc.addrs, err, tc.err)
		}
	}
	// What the check spares the user: the kernel refuses the pair.
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no IPv6 here (%v)", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if l2, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		l2.Close()
		t.Errorf("[::]:%d and 127.0.0.1:%d both bound: the wildcard check refuses a pair the kernel takes", port, port)
	}
}
