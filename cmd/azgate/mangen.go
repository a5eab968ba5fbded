//go:build mangen

// The man pages of the Debian package (make deb): built with -tags mangen
// only, so the shipped binary links neither cobra/doc nor go-md2man. The
// pages come from the same command tree the binary runs: no hand-kept copy.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() {
	register(func() *cobra.Command {
		return &cobra.Command{
			Use:    "gen-man DIR",
			Short:  "Write a man page (section 1) per command into DIR",
			Hidden: true,
			Args:   cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := os.MkdirAll(args[0], 0o755); err != nil {
					return err
				}
				root := cmd.Root()
				root.RemoveCommand(cmd)       // not a page of its own
				root.DisableAutoGenTag = true // reproducible: no date in the pages
				// No Title: cobra titles each page by its command's path.
				h := &doc.GenManHeader{Section: "1", Source: "azgate " + version, Manual: "azgate manual"}
				if err := doc.GenManTree(root, h, args[0]); err != nil {
					return fmt.Errorf("man pages: %w", err)
				}
				return nil
			},
		}
	})
}
