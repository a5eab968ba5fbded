package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"

	"github.com/azgate/azgate/internal/client"
	"github.com/azgate/azgate/internal/model"
)

// Exit codes: 1 for a failed command (the controller refused, a file is
// bad, ...), 2 for a command line azgate does not understand (an unknown
// command or flag, a wrong number of arguments).
const (
	exitError = 1
	exitUsage = 2
)

// refusedDryRun: a dry run whose write the guards would refuse without
// --force. The plan and the refusals are already printed (or in the
// --json answer); the command exits 1 so that a script gating on
// `--dry-run` or `diff` does not take a refused change for a good one.
type refusedDryRun struct{ n int }

func (e *refusedDryRun) Error() string {
	return fmt.Sprintf("dry run: the write would be refused without --force (%d refusal(s), printed above)", e.n)
}

// dryRunOutcome is nil, or refusedDryRun when a dry run met refusals.
func dryRunOutcome(refusals []string) error {
	if len(refusals) == 0 {
		return nil
	}
	return &refusedDryRun{len(refusals)}
}

// usageError is a command line azgate does not understand.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// guardGroups makes every command that only groups others (service,
// service backend, dns zone, ...) refuse an unknown subcommand with
// suggestions: cobra only does so for the root, and a nested group would
// print its help and exit 0 (`azgate service delet web` deleted nothing,
// successfully).
func guardGroups(c *cobra.Command) {
	for _, sub := range c.Commands() {
		guardGroups(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[groupAnnotation] = "true"
	c.SuggestionsMinimumDistance = 2
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

// groupAnnotation marks the commands guardGroups guards.
const groupAnnotation = "azgate/group"

// unknownCommand is the error for a word that is no subcommand of cmd.
func unknownCommand(cmd *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, cmd.CommandPath())
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += "; did you mean " + quoteJoin(s) + "?"
	}
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	msg += fmt.Sprintf(" (commands: %s; see %q)", strings.Join(names, ", "), cmd.CommandPath()+" --help")
	return &usageError{msg}
}

func quoteJoin(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, " or ")
}

// execute runs the command tree with args and reports an error: with
// --json as a JSON object on stdout (errorJSON), else as one message on
// stderr. It returns the exit code.
func execute(root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	code := exitError
	if isUsage(cmd, err) {
		code = exitUsage
	}
	var rd *refusedDryRun
	if errors.As(err, &rd) && (globals.json || jsonRequested(args)) {
		return code // the answer printed holds the refusals: one JSON document on stdout
	}
	if globals.json || jsonRequested(args) {
		printJSON(stdout, errorBody(err, code))
		return code
	}
	fmt.Fprintln(stderr, root.Name()+":", err)
	return code
}

// jsonRequested: --json on a command line that failed before its flags
// were parsed.
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// isUsage tells a command line error (cobra's own, for unknown commands,
// flags and argument counts) from a failed command.
func isUsage(cmd *cobra.Command, err error) bool {
	var ue *usageError
	if errors.As(err, &ue) {
		return true
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "flag needs an argument",
		"invalid argument", "required flag(s)", "accepts ", "requires at least", "requires at most", "if any flags in the group", "at least one of the flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// errorJSON is what a failed command prints on stdout under --json.
// Code is stable: "usage" (the command line), "not_found", "conflict",
// "precondition_failed" (a concurrent edit), "invalid" (validation),
// "refused" (needs --force), "unauthorized", "too_large",
// "unavailable" (the store), "error" (anything else). Status is the
// API's HTTP status when the controller answered; Fields its field
// errors.
type errorJSON struct {
	Error  string             `json:"error"`
	Code   string             `json:"code"`
	Status int                `json:"status,omitempty"`
	Exit   int                `json:"exit"`
	Fields []model.FieldError `json:"fields,omitempty"`
}

func errorBody(err error, exit int) errorJSON {
	out := errorJSON{Error: err.Error(), Code: "error", Exit: exit}
	if exit == exitUsage {
		out.Code = "usage"
		return out
	}
	var ae *client.APIError
	var pf *client.PreconditionFailed
	if errors.As(err, &pf) {
		ae = pf.APIError
	}
	if ae != nil || errors.As(err, &ae) {
		out.Status, out.Fields = ae.Status, ae.Fields
		switch ae.Status {
		case http.StatusNotFound:
			out.Code = "not_found"
		case http.StatusConflict:
			out.Code = "conflict"
			if ae.Force {
				out.Code = "refused"
			}
		case http.StatusPreconditionFailed:
			out.Code = "precondition_failed"
		case http.StatusUnprocessableEntity, http.StatusBadRequest:
			out.Code = "invalid"
		case http.StatusUnauthorized, http.StatusForbidden:
			out.Code = "unauthorized"
		case http.StatusRequestEntityTooLarge:
			out.Code = "too_large"
		case http.StatusServiceUnavailable:
			out.Code = "unavailable"
		}
	}
	return out
}

// printJSON prints v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
