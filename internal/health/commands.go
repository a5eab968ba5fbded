package health

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/model"
)

// Command is one health-check command that an edge's own configuration
// lists. A service's command check names it (model.CommandName); the
// program and its arguments never come from the API, so an API token
// cannot become code execution on the edges (issue 7).
type Command struct {
	Name string
	Path string   // absolute path of the program
	Args []string // its arguments (argv[1:]); no shell ever parses them
}

// Commands is an edge's list of health-check commands, by name.
type Commands map[string]Command

// Names returns the commands' names, sorted: what the edge publishes in
// its node status (never the paths).
func (c Commands) Names() []string {
	out := make([]string, 0, len(c))
	for n := range c {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Limits of a command run.
const (
	// MaxCommandOutput is how much of a command's output (stdout and
	// stderr together) is kept, for the edge's own debug log; the rest is
	// read and dropped so that the command is never blocked on a full
	// pipe. None of it is published.
	MaxCommandOutput = 4096
	// commandWaitDelay bounds how long a killed command's pipes are
	// waited for (a grandchild may hold them open).
	commandWaitDelay = time.Second
	// commandPath is the PATH of a command's minimal environment.
	commandPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// ParseCommand reads one command as --health-command takes it:
// "NAME=/abs/path [arg...]", the program and arguments split on spaces
// and tabs with no quoting (no shell; an argument with a space needs a
// wrapper script). The program must be an absolute path; it is not
// looked up in PATH.
func ParseCommand(spec string) (Command, error) {
	name, rest, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok {
		return Command{}, fmt.Errorf("health command %q: want NAME=/abs/path [args...]", spec)
	}
	name = strings.TrimSpace(name)
	if !model.ValidCommandName(name) {
		return Command{}, fmt.Errorf("health command %q: name %q is not 1-32 of a-z, 0-9 and '-'", spec, name)
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return Command{}, fmt.Errorf("health command %s: no program after '='", name)
	}
	c := Command{Name: name, Path: f[0], Args: f[1:]}
	if !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path {
		return Command{}, fmt.Errorf("health command %s: program %q is not a clean absolute path", name, c.Path)
	}
	return c, nil
}

// LoadCommandsFile reads a --health-commands file: one command a line in
// the --health-command form (NAME=/abs/path [args...]); blank lines and
// lines starting with '#' are skipped. The file decides what runs as the
// edge's user, so one that others may write is refused.
func LoadCommandsFile(path string) ([]Command, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("health commands file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("health commands file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("health commands file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("health commands file %s has mode %#o: others may change what the edge runs; chmod go-w it", path, fi.Mode().Perm())
	}
	var out []Command
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c, err := ParseCommand(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("health commands file %s: %w", path, err)
	}
	return out, nil
}

// NewCommands checks a list of commands (a name once; a program that
// exists, is an executable regular file and is safe from others, see
// checkOwnership) and indexes it.
func NewCommands(list []Command) (Commands, error) {
	out := Commands{}
	for _, c := range list {
		if _, dup := out[c.Name]; dup {
			return nil, fmt.Errorf("health command %s is given twice", c.Name)
		}
		fi, err := os.Stat(c.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("health command %s: program %s does not exist", c.Name, c.Path)
		case err != nil:
			return nil, fmt.Errorf("health command %s: %w", c.Name, err)
		case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
			return nil, fmt.Errorf("health command %s: %s is not an executable file", c.Name, c.Path)
		}
		if err := checkOwnership(c.Path); err != nil {
			return nil, fmt.Errorf("health command %s: %w", c.Name, err)
		}
		c.Args = slices.Clone(c.Args)
		out[c.Name] = c
	}
	return out, nil
}

// checkOwnership refuses a program that someone other than root or the
// edge's user could change: the program (followed through symlinks) and
// every directory above it up to / (of the path as given and of the
// resolved one) must be owned by root or the edge's user and not be
// writable by group or others. A directory writable by all with the
// sticky bit (/tmp) is accepted: there others cannot rename or remove what
// they do not own. The edge runs the program as its own user, often root:
// whoever can change it would run code as the edge.
func checkOwnership(path string) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	me := uint32(os.Geteuid())
	check := func(p string, fi fs.FileInfo) error {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		what := "program"
		if fi.IsDir() {
			what = "directory"
		}
		if st.Uid != 0 && st.Uid != me {
			return fmt.Errorf("%s %s is owned by uid %d, not root or the edge's user (uid %d): its owner could change what the edge runs", what, p, st.Uid, me)
		}
		perm := fi.Mode().Perm()
		if perm&0o022 != 0 && !(fi.IsDir() && fi.Mode()&fs.ModeSticky != 0) {
			return fmt.Errorf("%s %s has mode %#o: group or others may change what the edge runs; chmod go-w it", what, p, perm)
		}
		return nil
	}
	fi, err := os.Stat(real)
	if err != nil {
		return err
	}
	if err := check(real, fi); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, start := range []string{path, real} {
		for d := filepath.Dir(start); !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			fi, err := os.Lstat(d)
			if err != nil {
				return err
			}
			// A symlink's own mode means nothing (its directory, checked
			// next, says who may replace it; where it points is the
			// resolved path's chain).
			if fi.Mode()&fs.ModeSymlink == 0 {
				if err := check(d, fi); err != nil {
					return err
				}
			}
			if d == "/" {
				break
			}
		}
	}
	return nil
}

// capWriter keeps the first max bytes written to it and drops the rest,
// always taking everything so the command never blocks on its output.
type capWriter struct {
	buf   []byte
	max   int
	total int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.total += int64(len(p))
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// runCommand runs c for a backend until ctx ends: no shell, in its own
// process group (killed whole at the deadline, and after the command
// exits: what it left running in the background dies with it, so checks
// cannot pile up processes; a child that leaves the group with setsid or
// setpgid escapes this), with stdin from
// /dev/null, working directory /, and an environment of PATH plus
// AZGATE_BACKEND_ADDR and AZGATE_BACKEND_PORT only. It returns nil on exit
// 0; the error says only how it ended (exit status, signal, timeout),
// never what it printed: verdicts reach the API. out holds the first
// MaxCommandOutput bytes of the output, for the edge's own log.
func runCommand(ctx context.Context, c Command, addr netip.AddrPort) (out *capWriter, err error) {
	out = &capWriter{max: MaxCommandOutput}
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Args[0] = c.Path
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + commandPath,
		"AZGATE_BACKEND_ADDR=" + addr.Addr().String(), "AZGATE_BACKEND_PORT=" + strconv.Itoa(int(addr.Port()))}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The whole group: a script's children die with it.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = commandWaitDelay
	start := time.Now()
	err = cmd.Run()
	if cmd.Process != nil {
		// The group outlives its leader while any member lives, and its
		// ID (the leader's PID) is not reused meanwhile; with none left
		// this is ESRCH (the PID, just freed, is not handed out again
		// this soon: PIDs are allocated in sequence).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return out, fmt.Errorf("command %s timed out after %v", c.Name, time.Since(start).Round(time.Millisecond))
		}
		return out, fmt.Errorf("command %s stopped: %w", c.Name, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, nil
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return out, fmt.Errorf("command %s killed by signal %v", c.Name, ws.Signal())
		}
		return out, fmt.Errorf("command %s exited with status %d", c.Name, ee.ExitCode())
	case errors.Is(err, exec.ErrWaitDelay):
		return out, fmt.Errorf("command %s exited but left its output open", c.Name)
	}
	fmt.Fprintf(out, "\n%v", err) // for the edge's log only
	return out, fmt.Errorf("command %s could not start (see the edge's log)", c.Name)
}

// unlisted describes a target whose command this edge does not list.
func unlisted(t Target) string {
	return fmt.Sprintf("service %s pool %s: health check command %q is not listed on this edge (azgate edge --health-command %s=/path): its backends are not checked here",
		t.Service, t.Pool, string(t.Check.Command), t.Check.Command)
}
