package bwstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ServerConfig describes one AZ's redis-server as the lab and the tests
// start it.
type ServerConfig struct {
	// Dir holds the socket, the config (mode 0600, it carries the
	// password) and the log. It is created mode 0700: only its owner (root
	// in the lab) can reach the socket, whatever the socket's own mode.
	// Keep it short: a unix socket path has at most 107 bytes.
	Dir string
	// Netns, if set, runs the server inside that named network namespace
	// (`ip netns exec`). With no TCP listener this changes nothing about
	// reachability (unix sockets live in the file system); it keeps the
	// process with its AZ.
	Netns string
	// TCP, if set (host:port), also listens there; then a password is
	// mandatory and the address must be one only the namespace owns.
	TCP string
	// Password for requirepass; empty means a random one is made.
	Password string
	// Binary is the redis-server path (default: looked up in PATH).
	Binary string
	// MaxMemoryMB bounds the server's memory (default 256, noeviction: a
	// full store refuses writes rather than dropping reports silently).
	MaxMemoryMB int
	// ReplicaOf, if set (host:port), makes the server a read-only replica
	// of that primary, authenticating with PrimaryPassword (the pathd
	// clusters of the GSLB lab: one primary, a replica per server).
	ReplicaOf       string
	PrimaryPassword string
}

// Server is a running redis-server this process started.
type Server struct {
	Socket   string
	Password string
	PID      int
	cmd      *exec.Cmd
	done     chan error
}

// StartServer writes a config and starts redis-server with it, and waits
// (up to 10 s) until it answers PING on its socket. The config: no TCP
// port unless asked, unixsocketperm 700 in a 0700 directory,
// protected-mode yes, requirepass, no persistence, bounded memory and
// clients. The password is in the config file, never on a command line.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("bwstore: redis-server: no directory")
	}
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("bwstore: redis-server not found (Debian: apt-get install redis-server): %w", err)
		}
	}
	if !filepath.IsAbs(cfg.Dir) || strings.ContainsAny(cfg.Dir, " \t\r\n\"'\\") {
		return nil, fmt.Errorf("bwstore: redis-server dir %q: want an absolute path without spaces or quotes (it goes into redis.conf)", cfg.Dir)
	}
	port := "port 0\n"
	if cfg.TCP != "" {
		ap, err := netip.ParseAddrPort(cfg.TCP)
		if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
			return nil, fmt.Errorf("bwstore: redis-server tcp %q: want a specific address:port (never a wildcard)", cfg.TCP)
		}
		host, p := ap.Addr().String(), strconv.Itoa(int(ap.Port()))
		port = "port " + p + "\nbind " + host + "\n"
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("bwstore: redis-server dir: %w", err)
	}
	if err := checkServerDir(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("bwstore: redis-server dir: %w", err)
	}
	sock := filepath.Join(cfg.Dir, "redis.sock")
	if len(sock) > 107 {
		return nil, fmt.Errorf("bwstore: redis-server socket path %q is longer than 107 bytes", sock)
	}
	pw := cfg.Password
	if pw == "" {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		pw = hex.EncodeToString(b)
	}
	if strings.ContainsAny(pw, " \t\r\n\"'\\") {
		return nil, errors.New("bwstore: redis-server password: no spaces, quotes or backslashes")
	}
	mem := cfg.MaxMemoryMB
	if mem <= 0 {
		mem = 256
	}
	conf := port +
		"unixsocket " + sock + "\n" +
		"unixsocketperm 700\n" +
		"protected-mode yes\n" +
		"requirepass " + pw + "\n" +
		"daemonize no\n" +
		"save \"\"\n" +
		"appendonly no\n" +
		"dir " + cfg.Dir + "\n" +
		"logfile " + filepath.Join(cfg.Dir, "redis.log") + "\n" +
		fmt.Sprintf("maxmemory %dmb\n", mem) +
		"maxmemory-policy noeviction\n" +
		"maxclients 1024\n" +
		"timeout 300\n" +
		"enable-debug-command no\n" +
		"enable-module-command no\n"
	if cfg.ReplicaOf != "" {
		ap, err := netip.ParseAddrPort(cfg.ReplicaOf)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("bwstore: redis-server replica of %q: want address:port", cfg.ReplicaOf)
		}
		if cfg.PrimaryPassword == "" || strings.ContainsAny(cfg.PrimaryPassword, " \t\r\n\"'\\") {
			return nil, errors.New("bwstore: redis-server replica: the primary's password is empty or has spaces, quotes or backslashes")
		}
		conf += "replicaof " + ap.Addr().String() + " " + strconv.Itoa(int(ap.Port())) + "\n" +
			"masterauth " + cfg.PrimaryPassword + "\n" +
			"replica-read-only yes\n"
	}
	confPath := filepath.Join(cfg.Dir, "redis.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("bwstore: redis-server config: %w", err)
	}
	var cmd *exec.Cmd
	if cfg.Netns != "" {
		if checkName("netns", cfg.Netns) != nil {
			return nil, fmt.Errorf("bwstore: redis-server netns %q: bad name", cfg.Netns)
		}
		// ip execs redis-server in place: the PID is the server's.
		cmd = exec.Command("ip", "netns", "exec", cfg.Netns, bin, confPath)
	} else {
		cmd = exec.Command(bin, confPath)
	}
	cmd.Dir = cfg.Dir
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bwstore: start redis-server: %w", err)
	}
	s := &Server{Socket: sock, Password: pw, PID: cmd.Process.Pid, cmd: cmd, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	r, err := NewRedis(RedisConfig{Network: "unix", Addr: sock, Password: pw, CallTimeout: time.Second})
	if err != nil {
		s.Stop()
		return nil, err
	}
	defer r.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := r.Ping(ctx)
		if err == nil {
			return s, nil
		}
		select {
		case e := <-s.done:
			s.done <- e
			log, _ := os.ReadFile(filepath.Join(cfg.Dir, "redis.log"))
			return nil, fmt.Errorf("bwstore: redis-server exited (%v): %s", e, tail(string(log), 400))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("bwstore: redis-server on %s not ready: %w", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkServerDir refuses a Dir that someone else could change under the
// server: MkdirAll accepts an existing directory, and whoever owns Dir (or
// may rename entries of its parent) could swap redis.conf before
// redis-server reads it, or plant a symlink that os.WriteFile follows,
// and so run a redis-server of their own config as this process's user,
// or reach the socket. Dir must be a real directory (not a symlink) owned
// by this process's user, in a parent owned by root or this user that
// group and others cannot write (unless sticky, as /tmp: there others
// cannot rename what they do not own).
func checkServerDir(dir string) error {
	me := uint32(os.Geteuid())
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("bwstore: redis-server dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("bwstore: redis-server dir %s is not a directory (a symlink?): refused, its target could be anyone's", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != me {
		return fmt.Errorf("bwstore: redis-server dir %s is owned by uid %d, not this process's uid %d: its owner could swap the config or reach the socket", dir, st.Uid, me)
	}
	parent := filepath.Dir(dir)
	pfi, err := os.Stat(parent)
	if err != nil {
		return fmt.Errorf("bwstore: redis-server dir: %w", err)
	}
	if st, ok := pfi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && st.Uid != me {
		return fmt.Errorf("bwstore: redis-server dir %s: its parent %s is owned by uid %d, who could rename the directory away and put theirs in its place", dir, parent, st.Uid)
	}
	if pfi.Mode().Perm()&0o022 != 0 && pfi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("bwstore: redis-server dir %s: its parent %s has mode %#o, others could rename the directory away and put theirs in its place", dir, parent, pfi.Mode().Perm())
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Config is the client config for this server.
func (s *Server) Config() RedisConfig {
	return RedisConfig{Network: "unix", Addr: s.Socket, Password: s.Password}
}

// Stop sends SIGTERM to the server's PID, waits up to 5 s, then SIGKILL.
func (s *Server) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return nil
	case <-time.After(5 * time.Second):
	}
	_ = s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
	return nil
}
