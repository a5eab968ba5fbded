package gslbbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/azgate/azgate/internal/geo"
	"github.com/azgate/azgate/internal/gslb"
	"github.com/azgate/azgate/internal/gslb/dnsserver"
)

// ServeChildArg is the hidden subcommand the serving child runs as
// (`azgate-lab bench gslb-serve --config FILE`).
const ServeChildArg = "gslb-serve"

// ServeConfig is what the serving child reads (a JSON file the bench
// writes): where to listen, the MaxMind database, the zone, and the probe
// settings for the VIPs of the zone's GSLB targets.
type ServeConfig struct {
	Addr  string
	MMDB  string
	Zone  gslb.Config
	Probe ProbeSettings
	// CPUProfile, when set, is where the child writes a Go CPU profile of
	// its whole serving time (`bench gslb --cpuprofile`).
	CPUProfile string
}

// Serve is the child process: azgate's GSLB server as `azgate gslb` will
// run it (internal/gslb Handler and Server, a geo.DB locator, probe
// health), on one address, until ctx ends. It writes "ready ADDR" on
// stdout once both listeners serve, and the handler's counters on stderr
// when it stops.
func Serve(ctx context.Context, cfgPath string, stdout, stderr io.Writer) error {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	var cfg ServeConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", cfgPath, err)
	}
	db, err := geo.Open(cfg.MMDB)
	if err != nil {
		return err
	}
	defer db.Close()
	cat, err := gslb.Compile(cfg.Zone)
	if err != nil {
		return err
	}
	var vips []netip.Addr
	for _, z := range cfg.Zone.Zones {
		for _, g := range z.GSLB {
			for _, t := range g.Targets {
				vips = append(vips, t.VIP)
			}
		}
	}
	health, err := newHealth(cfg.Probe, vips)
	if err != nil {
		return err
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go health.Run(hctx)
	h := dnsserver.NewHandler(cat, db, health)
	// One UDP socket per thread (SO_REUSEPORT), as gdnsd's udp_threads.
	srv := dnsserver.NewServer(dnsserver.ServerConfig{Addr: cfg.Addr, UDPSockets: runtime.GOMAXPROCS(0)}, h)
	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if err := srv.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready %s GOMAXPROCS=%d\n", srv.UDPAddr(), runtime.GOMAXPROCS(0))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	s, u := &h.Stats, srv.UDPStats()
	fmt.Fprintf(stderr, "gslb-serve: queries %d formerr %d refused %d nxdomain %d servfail %d failopen %d; udp fast path %d, recvmmsg calls %d\n",
		s.Queries.Load(), s.FormErr.Load(), s.Refused.Load(), s.NXDomain.Load(), s.ServFail.Load(), s.FailOpen.Load(), u.Fast.Load(), u.Reads.Load())
	return err
}
