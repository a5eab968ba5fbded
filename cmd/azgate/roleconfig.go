package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/azgate/azgate/internal/dataplane"
	"github.com/azgate/azgate/internal/monitor"
	"github.com/azgate/azgate/internal/roleconfig"
)

// roles are the commands that run a role: each takes --config and
// --check-config (docs/config.md), and packaging/etc/azgate holds a
// default file for each.
var roles = []string{"controller", "edge", "agent", "bwmgr", "gslb", "pathd", "prober", "announce"}

// configOptions are the flags of c a config file may set: its own but
// --config, --check-config and --help; not the CLI's global ones (--api,
// --json, ...), which a role does not read.
func configOptions(c *cobra.Command) roleconfig.Options {
	skip := []string{"config", "check-config", "help"}
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) { skip = append(skip, f.Name) })
	return roleconfig.Options{Skip: skip, Joined: []string{"etcd-endpoints"}, Single: []string{"vip", "listen"}}
}

// prepareFunc does every check a role does before it starts (flags,
// addresses, files and their modes) and returns what starts it. It opens
// no socket and starts nothing: --check-config runs it alone.
type prepareFunc func(cmd *cobra.Command) (start func() error, err error)

// roleCommand makes c a role: --config FILE sets its flags from the file
// (the command line wins), --check-config runs prepare and says "ok" or
// what is wrong, and the role, once started, re-reads the file's
// log-level on SIGHUP.
func roleCommand(c *cobra.Command, prepare prepareFunc) {
	var path string
	var check bool
	c.Flags().StringVar(&path, "config", "", "YAML file of this role's settings: its keys are the long flag names, a flag given on the command line wins (docs/config.md)")
	c.Flags().BoolVar(&check, "check-config", false, "check the configuration (--config and the flags) as the role does before it starts, print ok or what is wrong, and exit (non-zero if wrong) without starting anything")
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		fs := cmd.Flags()
		cli := map[string]bool{}
		fs.Visit(func(f *pflag.Flag) { cli[f.Name] = true })
		if path != "" {
			if err := roleconfig.Load(path, fs, configOptions(cmd)); err != nil {
				return checkFailed(check, err)
			}
		}
		start, err := prepare(cmd)
		if err != nil {
			return checkFailed(check, err)
		}
		if check {
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		}
		stop := reloadOnHUP(path, fs, configOptions(cmd), cli)
		defer stop()
		return start()
	}
}

func checkFailed(check bool, err error) error {
	if check {
		return fmt.Errorf("configuration check failed:\n%w", err)
	}
	return err
}

// roleLevel is the running role's log level: roleLogger sets it, SIGHUP
// sets it again from the config file.
var roleLevel = new(slog.LevelVar)

// roleMonitor is the running role's monitor switch (edge, agent: their
// prepare sets it, the role attaches its data plane once loaded); SIGHUP
// sets its mode from the config file's monitor key.
var roleMonitor *monitor.Switch

// reloadOnHUP re-reads the config file's log-level, and an edge's or an
// agent's monitor, on SIGHUP (unless given on the command line, which
// wins as at start). Every other key takes effect at the next start
// (docs/config.md, "Reload"). Without it SIGHUP would end the process.
func reloadOnHUP(path string, fs *pflag.FlagSet, o roleconfig.Options, cli map[string]bool) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				reload(path, fs, o, cli)
			}
		}
	}()
	return func() { signal.Stop(hup); cancel() }
}

func reload(path string, fs *pflag.FlagSet, o roleconfig.Options, cli map[string]bool) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: roleLevel}))
	if path == "" {
		log.Info("SIGHUP: no --config file: nothing to reload")
		return
	}
	entries, err := roleconfig.Parse(path, fs, o)
	if err != nil {
		log.Error("SIGHUP: config file not reloaded; the running settings stay", "err", err)
		return
	}
	// Each key's value in the file, or its flag's default when the file
	// no longer sets it.
	value := func(key, def string) string {
		if f := fs.Lookup(key); f != nil {
			def = f.DefValue
		}
		for _, e := range entries {
			if e.Key == key {
				def = e.Values[0]
			}
		}
		return def
	}
	level := value("log-level", "info")
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		log.Error("SIGHUP: config file not reloaded; the running settings stay", "err", fmt.Errorf("%s: log-level %q: want debug, info, warn or error", path, level))
		return
	}
	var mode string
	reloadMonitor := roleMonitor != nil && fs.Lookup("monitor") != nil && !cli["monitor"]
	if reloadMonitor {
		mode = value("monitor", "drops")
		if _, err := dataplane.ParseMonitorMode(mode); err != nil {
			log.Error("SIGHUP: config file not reloaded; the running settings stay", "err", fmt.Errorf("%s: %w", path, err))
			return
		}
	}
	if cli["log-level"] {
		log.Info("SIGHUP: --log-level was given on the command line and wins over the file")
	} else {
		roleLevel.Set(l)
		log.Info("SIGHUP: reloaded log-level from the config file; other keys take effect at the next start", "file", path, "log-level", l.String())
	}
	switch {
	case reloadMonitor:
		was, err := roleMonitor.SetMode(mode)
		if err != nil {
			log.Error("SIGHUP: monitor not changed", "monitor", mode, "err", err)
			return
		}
		log.Info("SIGHUP: reloaded monitor from the config file", "file", path, "monitor", mode, "was", was)
	case roleMonitor != nil && cli["monitor"]:
		log.Info("SIGHUP: --monitor was given on the command line and wins over the file")
	}
}
