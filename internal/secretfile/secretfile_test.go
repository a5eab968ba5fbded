package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if _, err := Read(filepath.Join(dir, "missing"), "token"); err == nil {
		t.Error("missing file read")
	}
}
