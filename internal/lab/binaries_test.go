package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckBinaries: the lab finds azgate beside the running executable
// unless told otherwise, and refuses to start, naming the path and what to
// do, when azgate, azgate-node (beside azgate unless told otherwise) or
// azgate-lab is missing or not executable.
func TestCheckBinaries(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	def, err := DefaultBinary()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(exe), "azgate"); def != want {
		t.Errorf("DefaultBinary %q, want %q", def, want)
	}

	dir := t.TempDir()
	azgate := filepath.Join(dir, "azgate")
	if err := os.WriteFile(azgate, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "azgate-node"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope", "azgate")

	// Defaults: Binary beside this executable, LabBinary this executable.
	c := Config{}
	if err := c.binaryDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Binary != def || c.LabBinary != exe {
		t.Errorf("defaults: Binary %q, LabBinary %q; want %q, %q", c.Binary, c.LabBinary, def, exe)
	}
	if want := filepath.Join(filepath.Dir(exe), "azgate-node"); c.NodeBinary != want {
		t.Errorf("defaults: NodeBinary %q, want %q (beside Binary)", c.NodeBinary, want)
	}
	// A relative path is made absolute: the roles run elsewhere.
	t.Chdir(dir)
	c = Config{Binary: "./azgate", LabBinary: exe}
	if err := c.binaryDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.Binary != azgate || c.NodeBinary != azgate+"-node" {
		t.Errorf("relative Binary became %q, NodeBinary %q, want %q and %q", c.Binary, c.NodeBinary, azgate, azgate+"-node")
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // "" : no error
	}{
		{"both there", Config{Binary: azgate, LabBinary: exe}, nil},
		{"relative", Config{Binary: "azgate", LabBinary: "./plain"}, []string{"azgate: not found in PATH", "--azgate PATH"}},
		{"azgate missing", Config{Binary: missing, LabBinary: exe}, []string{"roles with the azgate binary", missing + ": no such file", "make build", "--azgate PATH"}},
		{"azgate not executable", Config{Binary: plain, LabBinary: exe}, []string{plain + ": not executable", "--azgate PATH"}},
		{"azgate a directory", Config{Binary: dir, LabBinary: exe}, []string{dir + ": not a regular file"}},
		{"azgate-lab missing", Config{Binary: azgate, LabBinary: missing}, []string{"servers with the azgate-lab binary", missing + ": no such file"}},
		{"azgate-node missing", Config{Binary: azgate, NodeBinary: missing, LabBinary: exe}, []string{"edges and agents with the azgate-node binary", missing + ": no such file", "make build"}},
	} {
		err := tc.cfg.CheckBinaries()
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error, want one saying %q", tc.name, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", tc.name, err, w)
			}
		}
	}

	// Up refuses before building anything (no root needed to see it).
	if _, err := Up(t.Context(), Config{Prefix: "azgt-bin-", StateDir: dir, Binary: missing, LabBinary: exe}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Up with a missing azgate: %v", err)
	}
	if _, err := UpGSLB(t.Context(), Config{Prefix: "azgt-binG-", StateDir: dir, Binary: missing, LabBinary: exe}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("UpGSLB with a missing azgate: %v", err)
	}
}
