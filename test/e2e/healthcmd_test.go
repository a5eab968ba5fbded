package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/lab"
	"github.com/azgate/azgate/internal/model"
)

// TestHealthCommands: the lab's edges list one health command
// (lab.HealthCommand, via --health-command) and publish its name; a
// service naming another command is refused; a service checked by the
// listed command gets the command's verdicts, and nothing the command
// prints reaches the API.
func TestHealthCommands(t *testing.T) {
	l := upLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := l.Client()
	if err != nil {
		t.Fatal(err)
	}
	// Every edge publishes the name (and only the name).
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		edges := st.Nodes["edge"]
		ok := len(edges) > 0
		for _, e := range edges {
			ok = ok && slices.Equal(e.HealthCommands, []string{lab.HealthCommand})
		}
		if ok {
			b, _ := json.Marshal(edges)
			if strings.Contains(string(b), "/health-") {
				t.Errorf("an edge status carries the command's path: %s", b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("edges do not all list %q: %+v", lab.HealthCommand, edges)
		}
		time.Sleep(200 * time.Millisecond)
	}

	check := func(name string) *model.HealthCheck {
		return &model.HealthCheck{Type: "command", Command: model.CommandName(name), Interval: model.Duration(model.MinCommandInterval),
			Timeout: model.Duration(200 * time.Millisecond), Rise: 1, Fall: 1}
	}
	// The DMZ servers (nat backends on the fabric) serve port 80; nothing
	// listens on 81 of the third. A command check is a program on the
	// edge: it is for nat backends (an encap guest is reached only through
	// its tunnel, which tcp/http/udp checks travel: TestHealthThroughTunnel).
	backends := []model.Backend{{Address: lab.DMZAddr(1), Port: 80}, {Address: lab.DMZAddr(2), Port: 80}, {Address: lab.DMZAddr(3), Port: 81}}
	dead := backends[2].Key()
	svc := &model.Service{Name: "cmd", VIP: netip.MustParseAddr(vipDMZ), Mode: model.ModeNAT,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: backends, Health: check("rm-rf")}}}
	_, err = c.PutService(ctx, svc)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(err.Error(), `health check command "rm-rf" is not listed by edge`) {
		t.Fatalf("a service naming an unlisted command: %v", err)
	}

	svc.Pools[0].Health = check(lab.HealthCommand)
	if _, err := c.PutService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		st, err := c.ServiceStatus(ctx, "cmd")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(st)
		if strings.Contains(string(b), "Connection refused") || strings.Contains(string(b), "/dev/tcp") {
			t.Fatalf("the command's output reached the API: %s", b)
		}
		if st.Health != nil && slices.Equal(st.Health.Down["web"], []string{dead}) && st.Health.DownCount() == 1 {
			detail := ""
			for _, bs := range st.Pools[0].Backends {
				for _, r := range bs.Reports {
					if !r.Up {
						detail = r.Detail
					}
				}
			}
			if detail != "command "+lab.HealthCommand+" exited with status 1" {
				t.Errorf("detail %q", detail)
			}
			t.Logf("verdict by %s: %s", lab.HealthCommand, b)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no verdict of %s alone down: %s", dead, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	waitServing(t, ctx, l, "http://"+vipDMZ+"/")

	// An encap pool cannot name a command: the edge could not reach the
	// guest with it.
	enc := &model.Service{Name: "cmd-encap", VIP: netip.MustParseAddr(vipWeb), Mode: model.ModeEncap,
		Listeners: []model.Listener{{Protocol: "tcp", Port: 80, Pool: "web"}},
		Pools:     []model.Pool{{Name: "web", Backends: []model.Backend{{Host: "az1-h1", Guest: "g1"}}, Health: check(lab.HealthCommand)}}}
	if _, err := c.PutService(ctx, enc); !errors.As(err, &ae) || ae.Status != 422 || !strings.Contains(err.Error(), "pools[0].health.type") {
		t.Fatalf("an encap pool with a command check: %v", err)
	}
}
