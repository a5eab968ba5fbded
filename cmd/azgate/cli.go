package main

import "github.com/spf13/cobra"

// globals are the flags every CLI noun shares.
var globals struct {
	api       string
	tokenFile string
	json      bool
}

func addGlobalFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&globals.api, "api", "", "controller API URL: http://HOST:PORT or unix:///path (default: $AZGATE_API, the lab's context, or http://127.0.0.1:7080)")
	f.StringVar(&globals.tokenFile, "token-file", "", "file holding the API bearer token (default: $AZGATE_TOKEN_FILE, the lab's context, or /var/lib/azgate/token)")
	f.BoolVar(&globals.json, "json", false, "print JSON instead of tables")
}
