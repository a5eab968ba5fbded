package bandwidth

import (
	"os"
	"testing"
)

func TestOpenStoreForRoles(t *testing.T) {
	if s, err := OpenStore("", ""); err != nil || s == nil {
		t.Fatalf("default: %v", err)
	}
	if _, err := OpenStore("mem:", ""); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://x", "redis://:secret@127.0.0.1:6379"} {
		if _, err := OpenStore(u, ""); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
	dir := t.TempDir()
	loose := dir + "/loose"
	if err := writeFile(loose, "pw\n", 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore("unix:///tmp/x.sock", loose); err == nil {
		t.Error("a password file readable by others accepted")
	}
	tight := dir + "/tight"
	if err := writeFile(tight, "pw\n", 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore("unix:///tmp/x.sock", tight)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func writeFile(path, s string, mode os.FileMode) error {
	if err := os.WriteFile(path, []byte(s), mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}
