package controller

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/azgate/azgate/internal/health"
	"github.com/azgate/azgate/internal/model"
	"github.com/azgate/azgate/internal/store"
)

// cmdJSON is a nat service (command checks are for nat backends: an encap
// guest is reached only through its tunnel) with a command check naming
// "check-app".
const cmdJSON = `{"name": "web", "vip": "198.51.100.20", "mode": "nat",
 "listeners": [{"protocol": "tcp", "port": 80, "pool": "web"}],
 "pools": [{"name": "web", "backends": [{"address": "198.19.1.1", "port": 8080}, {"address": "198.19.2.1", "port": 8080}],
            "health": {"type": "command", "command": "check-app", "interval": "1s", "timeout": "100ms", "rise": 1, "fall": 1}}]}`

func putEdgeStatus(t *testing.T, s *Server, edge string, cmds ...string) {
	t.Helper()
	b, _ := json.Marshal(model.NodeStatus{Role: "edge", Name: edge, HealthCommands: cmds})
	if _, err := s.Store().Client.Put(context.Background(), store.StatusRoot+"edge/"+edge, string(b)); err != nil {
		t.Fatal(err)
	}
}

// TestHealthCommandListed: a service whose command check names a command
// that the live edges serving its VIP do not list is refused with a 422
// naming the service, pool, command and edges; one that no edge lists is
// refused when edges are live; with no live edge it is accepted.
func TestHealthCommandListed(t *testing.T) {
	s := regionServer(t, Config{})
	if !strings.Contains(cmdJSON, `"check-app"`) {
		t.Fatal("cmdJSON did not get its command check")
	}

	// No edge live yet: accepted (the edges judge when they start).
	if r := call(t, s, "POST", "/v1/services", cmdJSON); r.code != 201 {
		t.Fatalf("no live edge: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "DELETE", "/v1/services/web", nil); r.code != 200 {
		t.Fatalf("delete: HTTP %d %s", r.code, r.body)
	}

	// edge-a1 and edge-a2 serve the VIP (pop-a covers 198.51.100.0/24).
	putEdgeStatus(t, s, "edge-a1", "check-app", "check-db")
	putEdgeStatus(t, s, "edge-a2", "check-db")
	r := call(t, s, "POST", "/v1/services", cmdJSON)
	e := r.apiError(t)
	if r.code != 422 || len(e.Fields) != 1 || e.Fields[0].Field != "pools[0].health.command" ||
		!strings.Contains(e.Fields[0].Msg, `service web pool web: health check command "check-app" is not listed by edge edge-a2`) {
		t.Fatalf("edge-a2 lacks the command: HTTP %d %s", r.code, r.body)
	}
	if r := call(t, s, "PUT", "/v1/services/web", cmdJSON); r.code != 422 {
		t.Errorf("PUT: HTTP %d %s", r.code, r.body)
	}
	doc := `{"services": [` + cmdJSON + `]}`
	r = call(t, s, "POST", "/v1/apply", doc)
	if e := r.apiError(t); r.code != 422 || len(e.Fields) != 1 || e.Fields[0].Field != "services[0].pools[0].health.command" {
		t.Errorf("apply: HTTP %d %s", r.code, r.body)
	}

	putEdgeStatus(t, s, "edge-a2", "check-app")
	if r := call(t, s, "POST", "/v1/services", cmdJSON); r.code != 201 {
		t.Fatalf("both edges list it: HTTP %d %s", r.code, r.body)
	}
	call(t, s, "DELETE", "/v1/services/web", nil)

	// Only an edge that does not serve the VIP is live: some live edge
	// must list the command.
	cli := s.Store().Client
	for _, e := range []string{"edge-a1", "edge-a2"} {
		cli.Delete(context.Background(), store.StatusRoot+"edge/"+e)
	}
	putEdgeStatus(t, s, "edge-b1", "check-db")
	r = call(t, s, "POST", "/v1/services", cmdJSON)
	if e := r.apiError(t); r.code != 422 || !strings.Contains(e.Error, `"check-app" is not listed by any of the 1 live edges`) {
		t.Errorf("no live edge lists it: HTTP %d %s", r.code, r.body)
	}
	putEdgeStatus(t, s, "edge-b1", "check-app")
	if r := call(t, s, "POST", "/v1/services", cmdJSON); r.code != 201 {
		t.Errorf("edge-b1 lists it: HTTP %d %s", r.code, r.body)
	}

	// A service written for the former API (an argv) is refused, naming
	// the field.
	old := strings.Replace(cmdJSON, `"command": "check-app"`, `"command": ["/bin/sh", "-c", "id"]`, 1)
	r = call(t, s, "PUT", "/v1/services/web", old)
	if e := r.apiError(t); r.code != 400 || len(e.Fields) != 1 || e.Fields[0].Field != "pools[0].health.command" || !strings.Contains(e.Error, "--health-command") {
		t.Errorf("argv: HTTP %d %s", r.code, r.body)
	}
}

// TestHealthCommandVerdict runs a listed command through an edge's health
// manager publishing into the controller's store: its verdict decides the
// backend's health, and what it prints never reaches the API.
func TestHealthCommandVerdict(t *testing.T) {
	s := regionServer(t, Config{HealthDebounce: 50 * time.Millisecond})
	if r := call(t, s, "POST", "/v1/services", cmdJSON); r.code != 201 {
		t.Fatalf("HTTP %d %s", r.code, r.body)
	}
	var svc model.Service
	json.Unmarshal(call(t, s, "GET", "/v1/services/web", nil).body, &svc)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The command is down for 198.19.1.1, up for the other.
	cmd, err := health.ParseCommand(`check-app=/bin/sh -c echo${IFS}SECRET-OUTPUT-$AZGATE_BACKEND_ADDR;test${IFS}$AZGATE_BACKEND_ADDR${IFS}!=${IFS}198.19.1.1`)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := health.NewCommands([]health.Command{cmd})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := &health.StorePublisher{Ctx: ctx, Store: s.Store(), Edge: "edge-a1", Log: quiet}
	defer pub.Close()
	m := health.NewManager(ctx, pub, quiet)
	m.SetCommands(cmds)
	p := svc.Pools[0]
	m.Update([]health.Target{
		{Service: "web", Pool: "web", Backend: p.Backends[0].Key(), Addr: netip.MustParseAddrPort("198.19.1.1:8080"), Check: *p.Health},
		{Service: "web", Pool: "web", Backend: p.Backends[1].Key(), Addr: netip.MustParseAddrPort("198.19.2.1:8080"), Check: *p.Health},
	})
	waitHealth(t, s, `{"web":["198.19.1.1:8080"]}`)
	var body []byte
	waitFor(t, func() bool {
		r := call(t, s, "GET", "/v1/services/web/status", nil)
		body = r.body
		return strings.Contains(string(body), `"down_votes":1`)
	})
	if strings.Contains(string(body), "SECRET-OUTPUT") {
		t.Errorf("the command's output reached the status: %s", body)
	}
	if !strings.Contains(string(body), "command check-app exited with status 1") {
		t.Errorf("status lacks the exit status: %s", body)
	}
}
