package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"holdfast/internal/admin"
	"holdfast/internal/auth"
)

func init() { addCommand(newUserCmd) }

// newUserCmd manages SCRAM users with AlterUserScramCredentials and
// DescribeUserScramCredentials, as kafka-configs.sh --entity-type users
// does: the client sends a salted password, never the password.
func newUserCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "user",
		Short: "Set, list and delete SCRAM users (AlterUserScramCredentials)",
	}
	conn := clientCommand(c)
	c.AddCommand(userSetCmd(conn), userListCmd(conn), userDeleteCmd(conn))
	return c
}

// scramMechanism reads --mechanism.
func scramMechanism(s string) (kadm.ScramMechanism, error) {
	switch strings.ToUpper(s) {
	case auth.MechScramSHA256:
		return kadm.ScramSha256, nil
	case auth.MechScramSHA512:
		return kadm.ScramSha512, nil
	}
	return 0, usagef("--mechanism %q: want SCRAM-SHA-256 or SCRAM-SHA-512", s)
}

func userSetCmd(conn *connFlags) *cobra.Command {
	var (
		name, password, mech string
		iterations           int32
	)
	c := &cobra.Command{
		Use:   "set --name NAME --password PASSWORD",
		Short: "Create a SCRAM user or change its password",
		Long: `Create a SCRAM user or change its password (AlterUserScramCredentials; the
broker needs ALTER on the cluster). The password may come from the
environment variable HOLDFAST_PASSWORD instead of --password, which keeps it
out of the process list and the shell's history.`,
		Example: `  holdfast user set --name bob --password bob-secret
  HOLDFAST_PASSWORD=bob-secret holdfast user set --name bob --mechanism SCRAM-SHA-256`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := scramMechanism(mech)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("password") {
				password = os.Getenv("HOLDFAST_PASSWORD")
			}
			if password == "" {
				return usagef("user set: give the password with --password or HOLDFAST_PASSWORD")
			}
			if iterations < auth.ScramMinIterations || iterations > auth.ScramMaxIterations {
				return usagef("--iterations %d: want %d..%d", iterations, auth.ScramMinIterations, auth.ScramMaxIterations)
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: name, Mechanism: m, Iterations: iterations, Password: password}})
				if err == nil {
					err = alteredErr(res)
				}
				if err != nil {
					return fmt.Errorf("user %s: %w", name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "set %s for %s\n", m, name)
				return nil
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "the user")
	c.Flags().StringVar(&password, "password", "", "the password (or the environment variable HOLDFAST_PASSWORD)")
	c.Flags().StringVar(&mech, "mechanism", auth.MechScramSHA512, "SCRAM-SHA-256 or SCRAM-SHA-512")
	c.Flags().Int32Var(&iterations, "iterations", 8192, fmt.Sprintf("SCRAM iterations (%d..%d)", auth.ScramMinIterations, auth.ScramMaxIterations))
	c.MarkFlagRequired("name")
	return c
}

func userListCmd(conn *connFlags) *cobra.Command {
	var names []string
	c := &cobra.Command{
		Use:     "list [--name NAME]...",
		Aliases: []string{"ls"},
		Short:   "List SCRAM users with their mechanisms and iterations (never their secrets)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.DescribeUserSCRAMs(ctx, names...)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS")
				var errs []error
				for _, u := range res.Sorted() {
					if u.Err != nil {
						errs = append(errs, fmt.Errorf("user %s: %w%s", u.User, u.Err, detail(u.ErrMessage)))
						continue
					}
					for _, ci := range u.CredInfos {
						fmt.Fprintf(w, "%s\t%s\t%d\n", u.User, ci.Mechanism, ci.Iterations)
					}
				}
				if err := w.Flush(); err != nil {
					return err
				}
				return errors.Join(errs...)
			})
		},
	}
	c.Flags().StringSliceVar(&names, "name", nil, "only these users (repeatable or comma-separated; default: every user)")
	return c
}

func userDeleteCmd(conn *connFlags) *cobra.Command {
	var name, mech string
	c := &cobra.Command{
		Use:   "delete --name NAME [--mechanism SCRAM-SHA-512]",
		Short: "Delete a SCRAM user's credential for one mechanism",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := scramMechanism(mech)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: name, Mechanism: m}}, nil)
				if err == nil {
					err = alteredErr(res)
				}
				if err != nil {
					return fmt.Errorf("user %s: %w", name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted %s of %s\n", m, name)
				return nil
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "the user")
	c.Flags().StringVar(&mech, "mechanism", auth.MechScramSHA512, "SCRAM-SHA-256 or SCRAM-SHA-512")
	c.MarkFlagRequired("name")
	return c
}

// alteredErr is the first failure of AlterUserScramCredentials, with the
// broker's message.
func alteredErr(res kadm.AlteredUserSCRAMs) error {
	for _, a := range res.Sorted() {
		if a.Err != nil {
			return fmt.Errorf("%w%s", a.Err, detail(a.ErrMessage))
		}
	}
	return nil
}

// detail is a broker's error message, when it says more than the code.
func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}
