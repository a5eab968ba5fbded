package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := Read(write("ok", "s3cret\r\nignored\n", 0o600), "token"); err != nil || got != "s3cret" {
		t.Errorf("ok: %q, %v", got, err)
	}
	if got, err := Read(write("noeol", "abc", 0o400), "token"); err != nil || got != "abc" {
		t.Errorf("no newline: %q, %v", got, err)
	}
	for _, c := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"group", "s3cret\n", 0o640, "chmod 600"},
		{"world", "s3cret\n", 0o604, "chmod 600"},
		{"empty", "\nsecond\n", 0o600, "empty"},
		{"big", strings.Repeat("x", MaxSize+1), 0o600, "at most"},
	} {
		_, err := Read(write(c.name, c.content, c.mode), "token")
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want an error with %q that does not quote the secret", c.name, err, c.want)
		}
	}
	if _, err := Read(dir, "token"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	// A FIFO is refused at once, not waited on for a writer.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Read(fifo, "token"); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("fifo: %v", err)
		}
	case <-time.After(5 * time.Second):
		// Unblock the reader so the test ends.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Error("fifo: Read still waiting for a writer after 5 s")
	}
	if _, err := Read(filepath.Join(dir, "missing"), "token"); err == nil {
		t.Error("missing file read")
	}
}
