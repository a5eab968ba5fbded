//go:build !node

package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/model"
)

func init() {
	register(func() *cobra.Command {
		c := &cobra.Command{Use: "az", Short: "Availability zones"}
		var region, desc string
		create := &cobra.Command{
			Use:   "create NAME",
			Short: "Create an AZ",
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cl, err := apiClient()
				if err != nil {
					return err
				}
				az := &model.AZ{Name: args[0], Region: region, Description: desc}
				res, err := cl.Create(cmd.Context(), az)
				if err != nil {
					return err
				}
				return writeResult(cmd, "AZ "+az.Name, res, az)
			},
		}
		create.Flags().StringVar(&region, "region", "", "region the AZ belongs to")
		create.Flags().StringVar(&desc, "description", "", "free text")
		c.AddCommand(create)
		c.AddCommand(objectCommands(model.KindAZ, describeAZ, azTable)...)
		return c
	})
}

func describeAZ(w io.Writer, o model.Object) {
	a := o.(*model.AZ)
	tw := newTable(w)
	row(tw, "name:", a.Name)
	row(tw, "region:", a.Region)
	row(tw, "description:", a.Description)
	tw.Flush()
}

func azTable(w io.Writer, objs []model.Object) {
	tw := newTable(w, "NAME", "REGION", "DESCRIPTION")
	for _, o := range objs {
		a := o.(*model.AZ)
		row(tw, a.Name, a.Region, a.Description)
	}
	tw.Flush()
	if len(objs) == 0 {
		fmt.Fprintln(w, "(no AZs)")
	}
}
