// Package secretfile reads passwords and tokens from files, by one rule
// for every flag that takes one (--token-file, --*-password-file): a
// regular file only its owner may read or write (one that others can read
// is no secret, one they can write lets them choose it), whose first line
// is the secret. An empty first line is an error: taken as "no secret" it
// would turn authentication off. Errors never quote the file's content.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// MaxSize bounds a secret file: a secret is a line, not a document.
const MaxSize = 64 << 10

// Read returns the first line of the file at path. what names the secret
// in errors ("--token-file", "redis password file").
func Read(path, what string) (string, error) {
	b, _, err := ReadFile(path, what)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = strings.TrimSuffix(line, "\r")
	if strings.TrimSpace(line) == "" {
		return "", fmt.Errorf("%s %s: the first line is empty", what, path)
	}
	return line, nil
}

// ReadFile returns the whole content of the file at path, by the same
// rule as Read (a regular file of at most MaxSize bytes that only its
// owner may read or write), and the FileInfo of the file it read (for a
// caller that reloads it when it changes).
func ReadFile(path, what string) ([]byte, os.FileInfo, error) {
	// O_NONBLOCK: a FIFO at path is refused below (not a regular file)
	// instead of hanging the start until something writes to it. It does
	// nothing to a regular file's reads.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat() // of the file opened: no swap after the check
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s %s: not a regular file", what, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, nil, fmt.Errorf("%s %s has mode %#o: group or others may read or write it; chmod 600 it", what, path, perm)
	}
	if fi.Size() > MaxSize {
		return nil, nil, fmt.Errorf("%s %s: %d bytes, at most %d", what, path, fi.Size(), MaxSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	if len(b) > MaxSize {
		return nil, nil, fmt.Errorf("%s %s: more than %d bytes", what, path, MaxSize)
	}
	return b, fi, nil
}
