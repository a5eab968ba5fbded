package lab

// Shared bandwidth in the lab (issue 10; docs/bandwidth.md, docs/lab.md
// "Shared bandwidth"): one redis-server per zone and for the region tier,
// the managers (bwmgr) of every zone and two of the region, and the
// --bw-store flags of the edges and agents.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/bwstore"
	"github.com/azgate/azgate/internal/netns"
	"github.com/azgate/azgate/internal/store"
)

// The lab's bandwidth zones besides the AZs (BW-CONTRACT.md): every edge
// reports Internet -> EIP traffic into the zone BWEdgeZone (edge
// --bw-zone), and the managers of the zones report to the region tier,
// which has a store of its own (bandwidth.RegionTier).
const (
	BWEdgeZone   = "edge"
	BWRegionTier = "region"
)

// bwServerMemMB bounds each of the lab's redis-servers (maxmemory,
// noeviction). The lab's reports are a few kB; 64 MB is far above them and
// keeps five servers from claiming 1.25 GB between them.
const bwServerMemMB = 64

// BWServer is one redis-server of the lab: a zone's measurement store or
// the region tier's.
type BWServer struct {
	Zone string `json:"zone"`
	// Netns is the namespace it runs in ("": the machine's, with the
	// controller). It listens on a unix socket only, which every
	// namespace reaches by path.
	Netns        string `json:"netns,omitempty"`
	Dir          string `json:"dir"`
	Socket       string `json:"socket"`
	PasswordFile string `json:"password_file"`
	PID          int    `json:"pid"`
}

// URL is the store URL the roles and managers are given (--bw-store,
// --store, --region-store).
func (s BWServer) URL() string { return "unix://" + s.Socket }

// BWManager is one bwmgr process the lab started.
type BWManager struct {
	Name  string   `json:"name"` // its holder name (--name), unique in the lab
	Scope string   `json:"scope"`
	Zone  string   `json:"zone,omitempty"` // az scope
	Netns string   `json:"netns,omitempty"`
	Args  []string `json:"args"` // after the binary
	PID   int      `json:"pid"`
	Log   string   `json:"log"`
}

// OwnerKey is the election key the manager campaigns for: one active
// manager per zone and one for the region.
func (m BWManager) OwnerKey() string {
	if m.Scope == "region" {
		return bwOwnerKey(BWRegionTier)
	}
	return bwOwnerKey(m.Zone)
}

// bwOwnerKey is the election key of a zone's manager, or of the region's
// for BWRegionTier.
func bwOwnerKey(zone string) string {
	if zone == BWRegionTier {
		return store.OwnerKey("bwmgr", "region")
	}
	return store.OwnerKey("bwmgr", "az-"+zone)
}

type bwState struct {
	Servers  []BWServer  `json:"servers"`
	Managers []BWManager `json:"managers"`
}

func (l *Lab) bwDir() string       { return filepath.Join(l.Cfg.StateDir, "bw") }
func (l *Lab) bwStateFile() string { return filepath.Join(l.bwDir(), "state.json") }

// bwZones are the zones with a store: every AZ, the edges' zone and the
// region tier.
func (l *Lab) bwZones() []string {
	var z []string
	for az := 1; az <= l.Cfg.AZs; az++ {
		z = append(z, fmt.Sprintf("az%d", az))
	}
	return append(z, BWEdgeZone, BWRegionTier)
}

// bwNetns is where a zone's store and manager run: an AZ's in its first
// host's namespace (an AZ runs its store on one of its machines), the
// edges' zone and the region tier in the machine's namespace, with the
// controller (they are the region's, not one node's).
func (l *Lab) bwNetns(zone string) string {
	var az int
	if _, err := fmt.Sscanf(zone, "az%d", &az); err == nil && az >= 1 && az <= l.Cfg.AZs {
		return l.Topo.Node(HostName(az, 1)).Netns
	}
	return ""
}

// startBWServers starts one redis-server per zone, at once (each takes
// 20-100 ms to answer), through bwstore.StartServer: a unix socket in
// a 0700 directory, a password, no persistence. The password is also
// written alone to BW_DIR/ZONE/password (0600), the file the roles and
// managers are given.
func (l *Lab) startBWServers(ctx context.Context) ([]BWServer, error) {
	if err := os.MkdirAll(l.bwDir(), 0o700); err != nil {
		return nil, err
	}
	zones := l.bwZones()
	out := make([]BWServer, len(zones))
	errs := make([]error, len(zones))
	var wg sync.WaitGroup
	for i, z := range zones {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := filepath.Join(l.bwDir(), z)
			s, err := bwstore.StartServer(ctx, bwstore.ServerConfig{Dir: dir, Netns: l.bwNetns(z), MaxMemoryMB: bwServerMemMB})
			if err != nil {
				errs[i] = fmt.Errorf("lab: bandwidth store of zone %s: %w", z, err)
				return
			}
			out[i] = BWServer{Zone: z, Netns: l.bwNetns(z), Dir: dir, Socket: s.Socket, PasswordFile: filepath.Join(dir, "password"), PID: s.PID}
			if err := os.WriteFile(out[i].PasswordFile, []byte(s.Password+"\n"), 0o600); err != nil {
				errs[i] = fmt.Errorf("lab: bandwidth store of zone %s: password file: %w", z, err)
			}
		}()
	}
	wg.Wait()
	var started []BWServer
	for _, s := range out {
		if s.PID != 0 {
			started = append(started, s)
		}
	}
	// Saved before any error is returned: Down stops what started.
	l.bw.Servers = started
	if err := l.saveBW(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// bwManagerArgs are the managers: two for the region (active and
// standby), one per zone.
func (l *Lab) bwManagerArgs() []BWManager {
	srv := map[string]BWServer{}
	for _, s := range l.bw.Servers {
		srv[s.Zone] = s
	}
	reg := srv[BWRegionTier]
	common := []string{"--region-store", reg.URL(), "--region-store-password-file", reg.PasswordFile, "--etcd-endpoints", l.etcdFlag()}
	if l.Cfg.BWGrace > 0 {
		common = append(common, "--grace", l.Cfg.BWGrace.String())
	}
	var out []BWManager
	for i := 1; i <= 2; i++ {
		name := fmt.Sprintf("region-%d", i)
		out = append(out, BWManager{Name: name, Scope: "region", Netns: l.bwNetns(BWRegionTier),
			Args: append([]string{"bwmgr", "--scope", "region", "--name", name}, common...)})
	}
	for _, z := range l.bwZones() {
		if z == BWRegionTier {
			continue
		}
		s := srv[z]
		name := "zone-" + z
		out = append(out, BWManager{Name: name, Scope: "az", Zone: z, Netns: s.Netns,
			Args: append([]string{"bwmgr", "--scope", "az", "--zone", z, "--name", name, "--store", s.URL(), "--store-password-file", s.PasswordFile}, common...)})
	}
	return out
}

// startBWManagers starts every manager (detached, in its own session, its
// output in the lab's log directory) and records the PIDs.
func (l *Lab) startBWManagers() error {
	l.bw.Managers = l.bwManagerArgs()
	for i := range l.bw.Managers {
		m := &l.bw.Managers[i]
		addr, err := bwMetricsAddr(m.Netns, i)
		if err != nil {
			return err
		}
		m.Args = append(m.Args, "--metrics-listen", addr)
	}
	var errs []error
	for i := range l.bw.Managers {
		if err := l.startBWManager(&l.bw.Managers[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, l.saveBW())...)
}

func (l *Lab) startBWManager(m *BWManager) error {
	m.Log = filepath.Join(l.logDir(), "bwmgr-"+m.Name+".log")
	lf, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	c, err := l.roleCommand("bwmgr-"+m.Name, m.Args)
	if err != nil {
		return err
	}
	if err := checkConfig(m.Netns, c.Check); err != nil {
		return fmt.Errorf("lab: bandwidth manager %s: %w", m.Name, err)
	}
	argv := c.Start
	var cmd *exec.Cmd
	if m.Netns != "" {
		cmd = netns.Command(m.Netns, argv...) // nsenter execs in place: the PID is azgate's
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("lab: start bandwidth manager %s: %w", m.Name, err)
	}
	m.PID = cmd.Process.Pid
	go cmd.Wait()
	return nil
}

func (l *Lab) saveBW() error {
	b, err := json.MarshalIndent(&l.bw, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.bwStateFile(), b, 0o600)
}

func (l *Lab) loadBW() {
	b, err := os.ReadFile(l.bwStateFile())
	if err == nil {
		json.Unmarshal(b, &l.bw)
	}
}

// bwServerFor is the store of zone (an AZ's, BWEdgeZone or
// BWRegionTier), if the lab runs one.
func (l *Lab) bwServerFor(zone string) (BWServer, bool) {
	for _, s := range l.bw.Servers {
		if s.Zone == zone {
			return s, true
		}
	}
	return BWServer{}, false
}

// bwRoleArgs are the --bw-* flags of an edge (zone BWEdgeZone) or of an
// agent (its AZ), as BW-CONTRACT.md names them; none if the lab runs no
// store for the zone.
func (l *Lab) bwRoleArgs(n *Node) []string {
	zone := n.AZ
	if n.Role == "edge" {
		zone = BWEdgeZone
	}
	s, ok := l.bwServerFor(zone)
	if !ok {
		return nil
	}
	args := []string{"--bw-store", s.URL(), "--bw-store-password-file", s.PasswordFile}
	if n.Role == "edge" {
		args = append(args, "--bw-zone", zone)
	}
	if l.Cfg.BWGrace > 0 {
		args = append(args, "--bw-grace", l.Cfg.BWGrace.String())
	}
	return args
}

// BWServers are the lab's redis-servers.
func (l *Lab) BWServers() []BWServer { return append([]BWServer(nil), l.bw.Servers...) }

// BWStore opens a client of a zone's store (the test reads the limits the
// managers pushed).
func (l *Lab) BWStore(zone string) (bwstore.Store, error) {
	s, ok := l.bwServerFor(zone)
	if !ok {
		return nil, fmt.Errorf("lab: no bandwidth store for zone %q", zone)
	}
	pw, err := os.ReadFile(s.PasswordFile)
	if err != nil {
		return nil, err
	}
	return bwstore.NewRedis(bwstore.RedisConfig{Network: "unix", Addr: s.Socket, Password: strings.TrimSpace(string(pw))})
}

// BWManagers are the lab's bandwidth managers with their PIDs.
func (l *Lab) BWManagers() []BWManager { return append([]BWManager(nil), l.bw.Managers...) }

func (l *Lab) bwManager(name string) *BWManager {
	for i := range l.bw.Managers {
		if l.bw.Managers[i].Name == name {
			return &l.bw.Managers[i]
		}
	}
	return nil
}

// BWActive is the name of the manager holding the scope's election
// ("region", or a zone's name), "" when none does.
func (l *Lab) BWActive(ctx context.Context, zone string) (string, error) {
	h, err := l.bwHolders(ctx, []string{bwOwnerKey(zone)})
	return h[bwOwnerKey(zone)], err
}

// bwHolders reads who holds each election key, through one etcd client
// and within one 5 s deadline (`lab status` asks for every scope: with
// etcd gone it waits 5 s, not 5 s per scope).
func (l *Lab) bwHolders(ctx context.Context, keys []string) (map[string]string, error) {
	eps, _ := l.etcdEndpoints()
	st, err := store.Connect(store.Options{Endpoints: eps})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]string{}
	for _, k := range keys {
		if _, ok := out[k]; ok {
			continue
		}
		h, err := st.Holder(ctx, k)
		if err != nil {
			return out, err
		}
		out[k] = h
	}
	return out, nil
}

// KillBWManager ends a bandwidth manager by its PID with sig (SIGKILL: it
// dies without releasing its election; SIGTERM: it stops cleanly) and
// waits until it is gone: SIGKILL after 10 s, an error if it still runs
// 5 s later (a process stuck in the kernel), rather than waiting forever.
func (l *Lab) KillBWManager(name string, sig syscall.Signal) error {
	m := l.bwManager(name)
	if m == nil {
		return fmt.Errorf("lab: no bandwidth manager %q", name)
	}
	if !isBWManager(m.PID, l.Cfg.StateDir) {
		return fmt.Errorf("lab: bandwidth manager %s (pid %d) is not running", name, m.PID)
	}
	syscall.Kill(m.PID, sig)
	if waitGone(m.PID, 10*time.Second) {
		return nil
	}
	syscall.Kill(m.PID, syscall.SIGKILL)
	if waitGone(m.PID, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("lab: bandwidth manager %s (pid %d) still runs 15 s after %v and SIGKILL", name, m.PID, sig)
}

// waitGone waits up to d for pid to end; false if it still runs.
func waitGone(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// StartBWManager starts a stopped bandwidth manager again with its
// arguments.
func (l *Lab) StartBWManager(name string) error {
	m := l.bwManager(name)
	if m == nil {
		return fmt.Errorf("lab: no bandwidth manager %q", name)
	}
	if isBWManager(m.PID, l.Cfg.StateDir) {
		return fmt.Errorf("lab: bandwidth manager %s is running (pid %d)", name, m.PID)
	}
	if err := l.startBWManager(m); err != nil {
		return err
	}
	return l.saveBW()
}

// isBWManager: pid is one of this lab's bandwidth managers (its command
// line names bwmgr and the lab's state directory), not a process that
// took over a recycled PID.
func isBWManager(pid int, stateDir string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	hasMgr, hasDir := false, false
	for _, a := range args {
		hasMgr = hasMgr || a == "bwmgr"
		hasDir = hasDir || strings.HasPrefix(a, "unix://"+stateDir+"/") || strings.HasPrefix(a, stateDir+"/")
	}
	return hasMgr && hasDir
}

// isBWServer: pid is a redis-server running in dir (its working
// directory, which StartServer sets).
func isBWServer(pid int, dir string) bool {
	if pid <= 0 || !alive(pid) {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return err == nil && cwd == dir
}

// stopBWManagers stops the lab's bandwidth managers by the PIDs recorded
// at start (SIGTERM, SIGKILL after 10 s), only while each PID is still
// that manager. Run it while the store (etcd) is up: a manager stopping
// releases its election there, and would wait for a store that is gone.
func stopBWManagers(stateDir string) error {
	st, err := readBWState(stateDir)
	var wg sync.WaitGroup
	for _, m := range st.Managers {
		if isBWManager(m.PID, stateDir) {
			wg.Add(1)
			go func() { defer wg.Done(); killWait(m.PID, 10*time.Second) }()
		}
	}
	wg.Wait()
	return err
}

// stopBWServers stops the lab's redis-servers by their PIDs (only while
// each PID is still a redis-server in its directory) and removes their
// directories. Both are safe on a lab without them or half started.
func stopBWServers(stateDir string) error {
	st, err := readBWState(stateDir)
	var wg sync.WaitGroup
	for _, s := range st.Servers {
		if isBWServer(s.PID, s.Dir) {
			wg.Add(1)
			go func() { defer wg.Done(); killWait(s.PID, 10*time.Second) }()
		}
	}
	wg.Wait()
	return errors.Join(err, os.RemoveAll(filepath.Join(stateDir, "bw")))
}

func readBWState(stateDir string) (bwState, error) {
	var st bwState
	p := filepath.Join(stateDir, "bw", "state.json")
	b, err := os.ReadFile(p)
	if err != nil {
		if os.IsNotExist(err) {
			return st, nil
		}
		return st, fmt.Errorf("lab: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("lab: %s: %w", p, err)
	}
	return st, nil
}
