package pathd

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// ReadSecret reads a token or password file by the repository's rules
// for secrets (as --etcd-password-file and the bandwidth store's password
// file): a regular file only its owner may read or write (one others can
// read is no secret; one they can write lets them choose it), whose first
// line is the secret, not empty. Errors never quote the content.
func ReadSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat() // of the file opened: no swap after the check
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("secret file %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("secret file %s has mode %#o: group or others may read or write it; chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return "", fmt.Errorf("secret file %s: first line empty", path)
	}
	return line, nil
}
