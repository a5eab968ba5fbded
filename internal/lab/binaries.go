package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinaryName is the shipped binary the lab runs its roles with. The lab
// itself is azgate-lab (cmd/azgate-lab): the production binary links no
// lab, benchmark or test code (cmd/azgate's TestShippedDeps).
const BinaryName = "azgate"

// NodeBinaryName is the shipped binary of the node roles (edge, agent:
// packaging.NodeRoles), which their units run: the lab runs them with it
// too, found beside Binary (make build puts bin/azgate-node there).
const NodeBinaryName = "azgate-node"

// DefaultBinary is the azgate binary the lab runs when Config.Binary is
// empty: azgate in the running executable's directory, where make build
// (bin/) and make install put it beside azgate-lab.
func DefaultBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(exe), BinaryName), nil
}

// binaryDefaults fills in Binary, NodeBinary (beside Binary) and
// LabBinary. A path with a slash is
// made absolute (the roles start in other namespaces and directories); a
// bare name is left for exec to look up in PATH.
func (c *Config) binaryDefaults() error {
	if c.Binary == "" {
		b, err := DefaultBinary()
		if err != nil {
			return err
		}
		c.Binary = b
	}
	if c.LabBinary == "" {
		b, err := os.Executable()
		if err != nil {
			return err
		}
		c.LabBinary = b
	}
	for _, p := range []*string{&c.Binary, &c.NodeBinary, &c.LabBinary} {
		if strings.ContainsRune(*p, '/') {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	if c.NodeBinary == "" {
		c.NodeBinary = NodeBinaryName
		if strings.ContainsRune(c.Binary, '/') {
			c.NodeBinary = filepath.Join(filepath.Dir(c.Binary), NodeBinaryName)
		}
	}
	return nil
}

// CheckBinaries fails, naming the binary and what to do, if a binary the
// lab runs is missing or not executable: before anything is built, not as
// a role that never starts.
func (c Config) CheckBinaries() error {
	if err := c.binaryDefaults(); err != nil {
		return err
	}
	if err := CheckExecutable(c.Binary); err != nil {
		return fmt.Errorf("the lab runs its roles with the azgate binary: %w (build it with make build, which puts bin/azgate beside bin/azgate-lab, or name it with --azgate PATH)", err)
	}
	if err := CheckExecutable(c.NodeBinary); err != nil {
		return fmt.Errorf("the lab runs its edges and agents with the azgate-node binary, as their units do: %w (build it with make build, which puts bin/azgate-node beside bin/azgate; it is looked for beside --azgate)", err)
	}
	if err := CheckExecutable(c.LabBinary); err != nil {
		return fmt.Errorf("the lab runs its servers with the azgate-lab binary: %w", err)
	}
	return nil
}

// CheckExecutable fails, naming path, if it is missing or not an
// executable file (a bare name: not found in PATH).
func CheckExecutable(path string) error {
	if !strings.ContainsRune(path, '/') {
		if _, err := exec.LookPath(path); err != nil {
			return fmt.Errorf("%s: not found in PATH", path)
		}
		return nil
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: no such file", path)
	}
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s: not executable", path)
	}
	return nil
}
