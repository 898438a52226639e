// Command holdfast is the Holdfast broker and its tools, in one binary.
//
// The command line is built with spf13/cobra (as kubectl, etcdctl and rpk
// are): flags may come before or after arguments, every command and
// subcommand has -h, and `holdfast completion bash|zsh|fish|powershell`
// prints a shell completion script.
//
// Adding a command: write a file with a constructor returning a
// *cobra.Command and register it in that file's init:
//
//	func init() { addCommand(newACLCmd) }
//
// Client commands take the shared connection flags with clientFlags (see
// client.go) and return their errors; main maps errors to exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kerr"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, for scripts.
const (
	exitOK      = 0 // done
	exitFailed  = 1 // the command ran and failed: the broker refused, a record was not delivered, ...
	exitUsage   = 2 // bad command line: unknown command or flag, wrong arguments
	exitTimeout = 3 // no broker answered within --timeout
)

// commands are the constructors of the top-level commands, added by each
// command's file in its init.
var commands []func() *cobra.Command

func addCommand(c func() *cobra.Command) { commands = append(commands, c) }

// usageError marks an error in the command line itself (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "holdfast",
		Short: "Holdfast: a Kafka-compatible log that never loses an acknowledged message",
		Long: `Holdfast: a Kafka-compatible log that never loses an acknowledged message.

Run a broker with 'holdfast serve'; the other commands are clients that talk
to any Kafka-compatible broker (--bootstrap, default localhost:9092).

Exit codes: 0 done, 1 the command failed, 2 bad command line,
3 no broker answered within --timeout.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w\nSee '%s -h'.", err, c.CommandPath())}
	})
	for _, c := range commands {
		root.AddCommand(c())
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), "holdfast", version)
			return nil
		},
	})
	// Every command checks its positional arguments: wrong ones are usage
	// errors, as are unknown subcommands of a command group.
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usagef("unknown command %q for %q\nSee '%s -h'.", args[0], c.CommandPath(), c.CommandPath())
				}
				return nil
			}
			c.RunE = func(c *cobra.Command, _ []string) error {
				return usagef("%s needs a subcommand\n\n%s", c.CommandPath(), c.UsageString())
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return root
}

func main() { os.Exit(run(os.Args[1:])) }

// run executes the command line and returns the exit code.
func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "holdfast: %s\n", plainError(err))
	var ue usageError
	switch {
	case errors.As(err, &ue) || isCobraUsage(err):
		return exitUsage
	case errors.Is(err, errNoAnswer) || errors.Is(err, context.DeadlineExceeded):
		return exitTimeout
	}
	return exitFailed
}

// plainError is err's text with a Kafka error code's generic description
// (franz-go's, e.g. INVALID_REQUEST's "most likely ... malformed by the
// client library") left out where the broker said what was wrong itself:
// the code and the broker's words are the message.
func plainError(err error) string {
	msg := err.Error()
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return msg
	}
	i := strings.Index(msg, ke.Error())
	if i < 0 {
		return msg
	}
	rest := msg[i+len(ke.Error()):]
	if strings.TrimSpace(strings.Trim(rest, "():;,.")) == "" {
		return msg // nothing from the broker: the description is all there is
	}
	return msg[:i] + ke.Message + rest
}

// isCobraUsage recognises cobra's own command-line errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "unknown command ") || strings.HasPrefix(msg, "required flag(s) ")
}

// noArgs, exactArgs and minArgs check positional arguments; a mismatch is
// a usage error.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q\nSee '%s -h'.", c.CommandPath(), args[0], c.CommandPath())
	}
	return nil
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s: want %d argument(s), got %d\nUsage: %s", c.CommandPath(), n, len(args), c.UseLine())
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("%s: want at least %d argument(s), got %d\nUsage: %s", c.CommandPath(), n, len(args), c.UseLine())
		}
		return nil
	}
}
