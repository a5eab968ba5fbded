package controller

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/azgate/azgate/internal/secretfile"
)

// Role is what a token may do. Each role may do what the ones before it
// may.
type Role int

const (
	// RoleNone is no role: the request carries no valid token.
	RoleNone Role = iota
	// RoleReadOnly may read: every GET route but the audit log.
	RoleReadOnly
	// RoleOperator may also write: every POST, PUT and DELETE route,
	// dry-run or not, but not force a write past the guards.
	RoleOperator
	// RoleAdmin may do everything: also force a write (?force=true) past
	// the guards (guard.go), and read the audit log (audit.go). The data directory's token is an admin's.
	RoleAdmin
)

var roleNames = map[Role]string{RoleReadOnly: "read-only", RoleOperator: "operator", RoleAdmin: "admin"}

func (r Role) String() string {
	if n, ok := roleNames[r]; ok {
		return n
	}
	return "none"
}

func parseRole(s string) (Role, bool) {
	for r, n := range roleNames {
		if n == s {
			return r, true
		}
	}
	return RoleNone, false
}

// DataDirTokenName is the identity of the data directory's token (the one
// the controller creates in DATA_DIR/token, an admin's).
const DataDirTokenName = "local-admin"

// identity is who a request authenticated as.
type identity struct {
	name string
	role Role
}

type identityKey struct{}

// tokenEntry is one token: its name, role and the SHA-256 of the token
// (plain tokens in the tokens file are hashed when read).
type tokenEntry struct {
	name string
	role Role
	sum  [sha256.Size]byte
}

// MinTokenLength is the shortest plain token a tokens file may give.
const MinTokenLength = 16

var tokenNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// parseTokens parses a tokens file: one token a line, as
//
//	NAME ROLE TOKEN
//	NAME ROLE sha256:HEX
//
// with blank lines and lines starting with # ignored. NAME is
// [A-Za-z0-9][A-Za-z0-9._@-]{0,63}, ROLE read-only, operator or admin.
// Names and tokens are unique. Errors name the line, never a token.
func parseTokens(b []byte, path string) ([]tokenEntry, error) {
	var out []tokenEntry
	names := map[string]int{}
	sums := map[[sha256.Size]byte]int{}
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("tokens file %s line %d: %d fields, want NAME ROLE TOKEN (or NAME ROLE sha256:HEX)", path, n, len(f))
		}
		e := tokenEntry{name: f[0]}
		if !tokenNameRE.MatchString(e.name) {
			return nil, fmt.Errorf("tokens file %s line %d: name %q: want letters, digits, '.', '_', '@', '-', at most 64", path, n, e.name)
		}
		if prev, dup := names[e.name]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: name %q given twice (line %d)", path, n, e.name, prev)
		}
		if e.name == DataDirTokenName {
			return nil, fmt.Errorf("tokens file %s line %d: name %q is the data directory token's", path, n, e.name)
		}
		var ok bool
		if e.role, ok = parseRole(f[1]); !ok {
			return nil, fmt.Errorf("tokens file %s line %d: role %q: want read-only, operator or admin", path, n, f[1])
		}
		if h, isSum := strings.CutPrefix(f[2], "sha256:"); isSum {
			d, err := hex.DecodeString(h)
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("tokens file %s line %d: sha256: want 64 hex digits", path, n)
			}
			copy(e.sum[:], d)
		} else {
			if len(f[2]) < MinTokenLength {
				return nil, fmt.Errorf("tokens file %s line %d: token of %d characters, at least %d", path, n, len(f[2]), MinTokenLength)
			}
			e.sum = sha256.Sum256([]byte(f[2]))
		}
		if prev, dup := sums[e.sum]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: same token as line %d", path, n, prev)
		}
		names[e.name], sums[e.sum] = n, n
		out = append(out, e)
	}
	return out, nil
}

// fileStamp is what tells a changed tokens file: a rename over it
// (another inode) or a write in place (mtime, ctime, size).
type fileStamp struct {
	ino, dev     uint64
	size         int64
	mtime, ctime time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino, st.dev = uint64(sys.Ino), uint64(sys.Dev)
		st.ctime = time.Unix(int64(sys.Ctim.Sec), int64(sys.Ctim.Nsec))
	}
	return st
}

// racyWindow is how long after a change a tokens file is read on every
// request instead of trusting its unchanged stamp (reload).
const racyWindow = time.Second

// tokenSet is the tokens a request may carry: the data directory's
// (admin) and the tokens file's, reloaded when the file changes. The
// file is stat'ed once on each request carrying a bearer token (one
// syscall, in Server.instrument); it is
// read again only when its stamp changed, or while it changed less than
// racyWindow before its last read. A file that no longer reads
// (removed, mode opened, a syntax error) leaves none of its tokens
// valid: a broken rotation must not keep revoked tokens alive. The data
// directory's token still works then.
type tokenSet struct {
	local tokenEntry
	path  string // the tokens file ("": none)
	log   *slog.Logger

	mu      sync.Mutex // serializes reloads
	stamp   fileStamp
	loaded  bool  // stamp is of a file read (or of a failed read)
	recent  bool  // the file read had changed within racyWindow: read it again
	lastErr error // of the last reload
	entries atomic.Pointer[[]tokenEntry]
}

func newTokenSet(local, path string, log *slog.Logger) (*tokenSet, error) {
	ts := &tokenSet{local: tokenEntry{name: DataDirTokenName, role: RoleAdmin, sum: sha256.Sum256([]byte(local))}, path: path, log: log}
	ts.entries.Store(&[]tokenEntry{})
	if path != "" {
		// At start, a tokens file that does not read is an error, not a
		// set without its tokens.
		if err := ts.reload(); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// reload reads the tokens file if its stamp changed.
func (ts *tokenSet) reload() error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	fi, err := os.Stat(ts.path)
	if err == nil && ts.loaded && !ts.recent && stampOf(fi) == ts.stamp {
		return ts.lastErr
	}
	readAt := time.Now()
	var st fileStamp
	if err == nil {
		st = stampOf(fi)
	}
	var entries []tokenEntry
	b, rfi, err := secretfile.ReadFile(ts.path, "--tokens-file")
	if err == nil {
		st = stampOf(rfi)
		entries, err = parseTokens(b, ts.path)
	}
	if err != nil {
		entries = nil
	}
	changed := !ts.loaded || st != ts.stamp
	ts.stamp, ts.loaded, ts.lastErr = st, true, err
	// File times tick coarsely (the kernel's clock tick): a write in
	// place of the same size soon after the one read may leave the
	// stamp as it was. A file changed within racyWindow of its read is
	// read again until it is older.
	ts.recent = readAt.Sub(st.mtime) < racyWindow || readAt.Sub(st.ctime) < racyWindow
	ts.entries.Store(&entries)
	if changed && ts.log != nil {
		if err != nil {
			ts.log.Warn("tokens file unusable: its tokens are refused until it is fixed (the data directory's token still works)", "err", err)
		} else {
			ts.log.Info("tokens file loaded", "path", ts.path, "tokens", len(entries))
		}
	}
	return err
}

// lookup returns the identity of the bearer token in the Authorization
// header value h ("Bearer TOKEN"), or RoleNone. Every token is compared
// (in constant time, by its SHA-256), whichever matches.
func (ts *tokenSet) lookup(h string) identity {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return identity{}
	}
	if ts.path != "" {
		ts.reload() // errors are logged, and leave the file's tokens out
	}
	sum := sha256.Sum256([]byte(tok))
	var found identity
	match := func(e *tokenEntry) {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found = identity{name: e.name, role: e.role}
		}
	}
	match(&ts.local)
	entries := *ts.entries.Load()
	for i := range entries {
		match(&entries[i])
	}
	return found
}

// requiredRole is the role a request needs: read-only for reads, but
// admin for the audit log; operator for writes, admin for a forced write.
func requiredRole(r *http.Request) Role {
	if r.Pattern == "GET /v1/audit" {
		return RoleAdmin
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return RoleReadOnly
	}
	if o, err := writeOptionsOf(r); err == nil && o.Force && !o.DryRun {
		return RoleAdmin
	}
	return RoleOperator
}

// whoami is the identity a request authenticated as ("" when none).
func whoami(r *http.Request) identity {
	id, _ := r.Context().Value(identityKey{}).(identity)
	return id
}
