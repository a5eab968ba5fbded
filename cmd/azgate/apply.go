//go:build !node

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/azgate/azgate/internal/api"
	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// summaryAbove: an apply of more objects prints a line per kind, not per
// object (--verbose prints them all).
const summaryAbove = 50

func init() {
	register(func() *cobra.Command {
		var (
			file           string
			prune, verbose bool
		)
		c := &cobra.Command{
			Use:   "apply -f FILE [--prune] [--dry-run] [--force] [--verbose]",
			Short: "Create or replace every object of a YAML or JSON document (all or nothing)",
			Long: `Reads a document with azs, hosts, edgesets, eips, ... lists (YAML or JSON;
"-f -" reads standard input) and stores every object in it: new ones are
created, changed ones replaced, equal ones left alone. If any object is
invalid, nothing is written and every error is printed with its place in
the document (e.g. eips[3].binding.host).

Objects not in the document are not touched, unless --prune: then the
stored objects of every kind the document has a list for (even an empty
one, "eips: []") that the list does not hold are deleted, in the same
all-or-nothing commit. Without --force the controller refuses a prune that
deletes more than 100 objects or every object of a kind.

--dry-run sends the document to the controller, which checks it against
the current state exactly as an apply would (validation, references, the
--force guards) and writes nothing. More than 50 objects print one line
per kind; --verbose prints every object. "azgate diff -f FILE" shows what
would change, field by field.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				res, err := applyFile(cmd, file, client.ApplyOptions{Prune: prune})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if globals.json {
					if err := printJSON(out, res); err != nil {
						return err
					}
					return dryRunOutcome(res.Refusals)
				}
				printWarnings(cmd, res.Warnings)
				if verbose || len(res.Objects) <= summaryAbove {
					tw := newTable(out, "KIND", "KEY", "ACTION")
					for _, o := range res.Objects {
						row(tw, model.Singular(o.Kind), o.Key, o.Action)
					}
					tw.Flush()
				} else {
					kindSummary(out, res.Objects)
				}
				if err := applySummary(out, res); err != nil {
					return err
				}
				return dryRunOutcome(res.Refusals)
			},
		}
		c.Flags().StringVarP(&file, "file", "f", "", `document to apply ("-" for standard input)`)
		c.Flags().BoolVar(&prune, "prune", false, "delete the stored objects of the kinds the document lists that it does not hold")
		c.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every object, however many")
		c.MarkFlagRequired("file")
		return c
	})
	register(func() *cobra.Command {
		var (
			file  string
			prune bool
		)
		c := &cobra.Command{
			Use:   "diff -f FILE [--prune]",
			Short: "Show what applying a document would change, field by field (writes nothing)",
			Long: `Sends the document to the controller as a dry run (apply --dry-run) and
prints every object that would be created, changed or deleted (with
--prune), with the changed fields of each changed one, then a count of
the unchanged ones. Exits 0 whether or not there are changes, 1 when the
guards would refuse the write without --force; with --json
the apply result, each changed object with its changes.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				globals.dryRun = true
				res, err := applyFile(cmd, file, client.ApplyOptions{Prune: prune, Diff: true})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if globals.json {
					if err := printJSON(out, res); err != nil {
						return err
					}
					return dryRunOutcome(res.Refusals)
				}
				printWarnings(cmd, res.Warnings)
				printDiff(out, res)
				return dryRunOutcome(res.Refusals)
			},
		}
		c.Flags().StringVarP(&file, "file", "f", "", `document to compare ("-" for standard input)`)
		c.Flags().BoolVar(&prune, "prune", false, "also show the deletions apply --prune would make")
		c.MarkFlagRequired("file")
		return c
	})
	register(func() *cobra.Command {
		return &cobra.Command{
			Use:   "export",
			Short: "Print every object of the region as one apply document (YAML; JSON with --json)",
			Long: `Reads every object the users write (not the controller's health verdicts)
at one store revision (GET /v1/export: a write meanwhile does not tear it)
and prints them as one document that "azgate apply -f" takes back to no
change: "azgate export > region.yaml; azgate diff -f region.yaml" shows
nothing to do. The first line says the revision ("# azgate export at
revision N"; with --json it goes to standard error).`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				doc, rev, err := cl.Export(cmd.Context())
				if err != nil {
					return fmt.Errorf("reading the region: %w", err)
				}
				if globals.json {
					fmt.Fprintf(cmd.ErrOrStderr(), "exported at revision %d\n", rev)
					return printJSON(cmd.OutOrStdout(), doc)
				}
				b, err := yaml.Marshal(doc)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "# azgate export at revision %d\n%s", rev, b)
				return err
			},
		}
	})
}

// addToDocument appends o to the list of its kind.
func addToDocument(d *model.Document, o model.Object) error { return d.Add(o) }

// applyFile parses a document and sends it, with progress on stderr when
// it is a terminal.
func applyFile(cmd *cobra.Command, file string, opts client.ApplyOptions) (client.ApplyResult, error) {
	var res client.ApplyResult
	data, err := readInput(cmd, file)
	if err != nil {
		return res, err
	}
	progress := isTerminal(cmd.ErrOrStderr()) && !globals.json
	start := time.Now()
	doc, err := model.ParseDocument(data)
	if err != nil {
		var es model.Errors
		if errors.As(err, &es) {
			return res, fmt.Errorf("%s: %d error(s), nothing applied:%s", file, len(es), errorLines(es))
		}
		return res, fmt.Errorf("%s: %w", file, err)
	}
	cl, err := apiClient()
	if err != nil {
		return res, err
	}
	if progress {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d objects (%d bytes) read in %v; sending to the controller...\n", file, len(doc.Objects()), len(data), time.Since(start).Round(time.Millisecond))
	}
	res, err = cl.ApplyWith(cmd.Context(), doc, opts)
	if err != nil {
		return res, fmt.Errorf("%s: %w", file, err)
	}
	if progress {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: answered in %v\n", file, time.Since(start).Round(time.Millisecond))
	}
	return res, nil
}

// isTerminal: w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// kindSummary prints, per kind, how many objects each action touched.
func kindSummary(out io.Writer, objs []api.AppliedObject) {
	type counts struct{ created, updated, unchanged, deleted int }
	per := map[string]*counts{}
	var kinds []string
	for _, o := range objs {
		c := per[o.Kind]
		if c == nil {
			c = &counts{}
			per[o.Kind] = c
			kinds = append(kinds, o.Kind)
		}
		switch o.Action {
		case api.Created:
			c.created++
		case api.Updated:
			c.updated++
		case api.Deleted:
			c.deleted++
		default:
			c.unchanged++
		}
	}
	tw := newTable(out, "KIND", "CREATED", "UPDATED", "UNCHANGED", "DELETED")
	for _, k := range kinds {
		c := per[k]
		row(tw, k, c.created, c.updated, c.unchanged, c.deleted)
	}
	tw.Flush()
	fmt.Fprintf(out, "(%d objects: one line per kind above %d; --verbose lists every one)\n", len(objs), summaryAbove)
}

func applySummary(out io.Writer, res client.ApplyResult) error {
	what := fmt.Sprintf("revision %d", res.Revision)
	if res.DryRun {
		what = fmt.Sprintf("dry run at revision %d, nothing was written", res.Revision)
	}
	deleted := ""
	if res.Deleted > 0 {
		deleted = fmt.Sprintf(", %d deleted", res.Deleted)
	}
	_, err := fmt.Fprintf(out, "%s: %d created, %d updated, %d unchanged%s\n", what, res.Created, res.Updated, res.Unchanged, deleted)
	printRefusals(out, res.Refusals)
	return err
}

// printDiff prints the objects a dry run would change: "+" created,
// "~" updated with its fields, "-" deleted.
func printDiff(out io.Writer, res client.ApplyResult) {
	for _, o := range res.Objects {
		name := model.Singular(o.Kind) + " " + o.Key
		switch o.Action {
		case api.Created:
			fmt.Fprintf(out, "+ %s (created)\n", name)
		case api.Deleted:
			fmt.Fprintf(out, "- %s (deleted)\n", name)
		case api.Updated:
			fmt.Fprintf(out, "~ %s (changed)\n", name)
			for _, ch := range o.Changes {
				fmt.Fprintf(out, "    %s: %s -> %s\n", ch.Field, orUnset(ch.Old), orUnset(ch.New))
			}
		}
	}
	defer printRefusals(out, res.Refusals)
	if res.Created+res.Updated+res.Deleted == 0 {
		fmt.Fprintf(out, "no changes: %d objects unchanged (revision %d)\n", res.Unchanged, res.Revision)
		return
	}
	fmt.Fprintf(out, "%d to create, %d to change, %d to delete, %d unchanged (at revision %d; nothing was written)\n",
		res.Created, res.Updated, res.Deleted, res.Unchanged, res.Revision)
}

func orUnset(b []byte) string {
	if len(b) == 0 {
		return "(unset)"
	}
	return strings.TrimSpace(string(b))
}

func readInput(cmd *cobra.Command, file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(cmd.InOrStdin())
	}
	return os.ReadFile(file)
}

func errorLines(es model.Errors) string {
	s := ""
	for _, e := range es {
		s += "\n  " + e.Error()
	}
	return s
}
