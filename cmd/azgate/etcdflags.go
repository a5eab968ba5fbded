package main

import (
	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/store"
)

// addEtcdAuthFlags registers the flags every role uses to authenticate to
// an external etcd. The password comes from a file: a flag's value is
// visible to every local user in ps.
func addEtcdAuthFlags(c *cobra.Command, a *store.ClientAuth) {
	f := c.Flags()
	f.StringVar(&a.CACert, "etcd-cacert", "", "PEM CA bundle that signs etcd's server certificate (TLS; endpoints must be https://)")
	f.StringVar(&a.Cert, "etcd-cert", "", "PEM client certificate for etcd's --client-cert-auth (with --etcd-key)")
	f.StringVar(&a.Key, "etcd-key", "", "PEM key of --etcd-cert")
	f.StringVar(&a.User, "etcd-user", "", "etcd user name (etcd authentication; with --etcd-password-file)")
	f.StringVar(&a.PasswordFile, "etcd-password-file", "", "file whose first line is --etcd-user's password")
}
