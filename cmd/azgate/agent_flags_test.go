//go:build !node

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestAgentLocalAllowFlags: a bad --local-allow, or the old
// --local-prefix, stops the agent with an error naming the flag before it
// opens the store (whose endpoint here is refused: opened first, it would
// have answered with its own error).
func TestAgentLocalAllowFlags(t *testing.T) {
	for args, msg := range map[string]string{
		"--local-prefix 198.18.0.0/15":         "--local-prefix is gone",
		"--local-allow 10.0.0.0/8:tcp":         `--local-allow "10.0.0.0/8:tcp": tcp needs a port`,
		"--local-allow 0.0.0.0/0":              "shorter than /8",
		"--local-allow 169.254.0.0/16:udp:9-3": "LO <= HI",
	} {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"agent", "--name", "h1", "--underlay-if", "ul0",
			"--etcd-endpoints", "bogus://x"}, strings.Fields(args)...))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %v, want one saying %q", args, err, msg)
		}
	}
}

// TestEtcdLoadJitterFlag: --etcd-load-jitter out of [0, 5m] stops an
// edge or an agent with an error naming the flag before it opens the
// store; 5m is accepted (the role then fails on the endpoint).
func TestEtcdLoadJitterFlag(t *testing.T) {
	for _, role := range []string{"edge --attach eth0", "agent --underlay-if ul0"} {
		for _, v := range []string{"-1s", "6m", "5m"} {
			root := newRoot()
			var out bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(append(strings.Fields(role), "--name", "n1", "--etcd-endpoints", "bogus://x", "--etcd-load-jitter", v))
			err := root.Execute()
			// 5m passes, to fail on the endpoint.
			if refused := v != "5m"; err == nil || strings.Contains(err.Error(), "--etcd-load-jitter "+v) != refused {
				t.Errorf("%s --etcd-load-jitter %s: error %v (refused: want %v)", role, v, err, refused)
			}
		}
	}
}
