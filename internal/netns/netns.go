// Package netns creates, enters and removes named network namespaces the way
// iproute2 does (a bind mount under /run/netns), so namespaces made here are
// visible to `ip netns` and the other way round.
//
// Only the network namespace is switched: the mount namespace (and so
// /sys/fs/bpf) stays the caller's, which keeps pinned BPF objects shared.
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is where named namespaces are mounted, as with `ip netns`.
const Dir = "/run/netns"

// Path returns the bind-mount path of the named namespace.
func Path(name string) string { return filepath.Join(Dir, name) }

// Exists reports whether the named namespace exists.
func Exists(name string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(Path(name), &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Create makes a new named network namespace. It fails if one exists.
func Create(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("netns: invalid name %q", name)
	}
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	if err := ensureSharedDir(); err != nil {
		return err
	}
	path := Path(name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		// A thread whose namespace could not be restored must die with its
		// goroutine, so the thread is never unlocked on failure.
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		merr := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- merr
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("netns %s: %w", name, err)
	}
	// Bring loopback up: every node expects it.
	return Do(name, func() error {
		return exec.Command("ip", "link", "set", "lo", "up").Run()
	})
}

// Attach names an existing namespace, as `ip netns attach` does: nsfile
// (/proc/PID/ns/net, or another mount of a namespace) is bind-mounted at
// Path(name). Delete removes the name; the namespace lives on as long as
// anything else holds it.
func Attach(name, nsfile string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("netns: invalid name %q", name)
	}
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	if err := ensureSharedDir(); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(nsfile, &st); err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	if st.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("netns %s: %s is not a namespace", name, nsfile)
	}
	path := Path(name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	f.Close()
	if err := unix.Mount(nsfile, path, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return fmt.Errorf("netns %s: bind %s: %w", name, nsfile, err)
	}
	return nil
}

// ensureSharedDir makes Dir a mount point with shared propagation before a
// namespace is mounted in it, as iproute2's `ip netns add` does. Otherwise
// the first `ip netns add` anyone runs while our namespaces exist
// bind-mounts Dir over itself: our namespace mounts stay underneath, out of
// reach, and deleting one fails with "device or resource busy".
//
// When Dir has to be made a mount point here while namespaces are already
// mounted in it (made by an earlier version, or by anything else that
// mounts without this step), the recursive bind copies them onto the new
// mount and the originals underneath are unmounted through a handle on the
// directory taken before the bind: each namespace then has exactly one
// mount, which Delete can remove.
func ensureSharedDir() error {
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) { // EINVAL: not a mount point yet
		return fmt.Errorf("netns: make %s a shared mount: %w", Dir, err)
	}
	under, err := unix.Open(Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer unix.Close(under)
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns: bind-mount %s on itself: %w", Dir, err)
	}
	if err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("netns: make %s a shared mount: %w", Dir, err)
	}
	base := fmt.Sprintf("/proc/self/fd/%d", under)
	ents, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	for _, e := range ents {
		var st unix.Statfs_t
		p := filepath.Join(base, e.Name())
		if unix.Statfs(p, &st) == nil && st.Type == unix.NSFS_MAGIC {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("netns: unmount the shadowed mount of %s: %w", e.Name(), err)
			}
		}
	}
	return nil
}

// Delete removes the named namespace. Processes still inside keep it alive
// until they exit; Delete does not kill them.
func Delete(name string) error {
	path := Path(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	return nil
}

// List returns the named namespaces whose names start with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Do runs fn on an OS thread switched into the named namespace. Sockets,
// netlink handles and BPF test runs made inside fn belong to that namespace.
func Do(name string, fn func() error) error {
	target, err := unix.Open(Path(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	defer unix.Close(target)

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns %s: setns: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns %s: setns back: %w", name, err)
			return // thread stays locked and exits with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Command returns a command that runs argv inside the named namespace
// (through nsenter, which switches only the network namespace).
func Command(name string, argv ...string) *exec.Cmd {
	args := append([]string{"--net=" + Path(name), "--"}, argv...)
	return exec.Command("nsenter", args...)
}

// Sysctl writes a sysctl (dotted key) inside the named namespace.
func Sysctl(name, key, value string) error {
	return Do(name, func() error {
		p := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
		if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
		}
		return nil
	})
}
