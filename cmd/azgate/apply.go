package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		var file string
		c := &cobra.Command{
			Use:   "apply -f FILE",
			Short: "Create or replace every object of a YAML or JSON document (all or nothing)",
			Long: `Reads a document with azs, hosts, edgesets and eips lists (YAML or JSON;
"-f -" reads standard input) and stores every object in it: new ones are
created, changed ones replaced, equal ones left alone. Objects not in the
document are not touched. If any object is invalid, nothing is written and
every error is printed with its place in the document (e.g.
eips[3].binding.host).`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				data, err := readInput(cmd, file)
				if err != nil {
					return err
				}
				doc, err := model.ParseDocument(data)
				if err != nil {
					var es model.Errors
					if errors.As(err, &es) {
						return fmt.Errorf("%s: %d error(s), nothing applied:%s", file, len(es), errorLines(es))
					}
					return fmt.Errorf("%s: %w", file, err)
				}
				cl, err := apiClient()
				if err != nil {
					return err
				}
				res, err := cl.Apply(cmd.Context(), doc)
				if err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				out := cmd.OutOrStdout()
				if globals.json {
					return printJSON(out, res)
				}
				tw := newTable(out, "KIND", "KEY", "ACTION")
				for _, o := range res.Objects {
					row(tw, model.Singular(o.Kind), o.Key, o.Action)
				}
				tw.Flush()
				_, err = fmt.Fprintf(out, "revision %d: %d created, %d updated, %d unchanged\n", res.Revision, res.Created, res.Updated, res.Unchanged)
				return err
			},
		}
		c.Flags().StringVarP(&file, "file", "f", "", `document to apply ("-" for standard input)`)
		c.MarkFlagRequired("file")
		return c
	})
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
