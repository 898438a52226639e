package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

// The client commands talk to any Kafka-compatible broker with franz-go.

// errNoAnswer is returned when no broker answered within --timeout (exit
// code 3).
var errNoAnswer = errors.New("no broker answered")

// connFlags are the flags every client command has.
type connFlags struct {
	bootstrap     string
	timeout       time.Duration
	commandConfig string // Kafka client properties: security.protocol, sasl.*, ssl.* (secure_client.go)
}

// clientCommand marks c as a client command: it gets --bootstrap,
// --timeout and --command-config, for itself and every subcommand.
func clientCommand(c *cobra.Command) *connFlags {
	f := &connFlags{}
	def := "localhost:9092"
	if v := os.Getenv("HOLDFAST_BOOTSTRAP"); v != "" {
		def = v
	}
	c.PersistentFlags().StringVarP(&f.bootstrap, "bootstrap", "b", def, "comma-separated broker addresses (env HOLDFAST_BOOTSTRAP; also --bootstrap-server, as Kafka's tools spell it)")
	// Kafka's tools (and kcat's -b) spell it so; an operator's fingers
	// should not have to learn a new name.
	c.SetGlobalNormalizationFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "bootstrap-server" {
			name = "bootstrap"
		}
		return pflag.NormalizedName(name)
	})
	c.PersistentFlags().DurationVar(&f.timeout, "timeout", 30*time.Second, "longest wait for the brokers to answer; then exit 3")
	c.PersistentFlags().StringVar(&f.commandConfig, "command-config", os.Getenv("HOLDFAST_COMMAND_CONFIG"),
		"Kafka client properties for a secured cluster: security.protocol, sasl.*, ssl.* (env HOLDFAST_COMMAND_CONFIG; docs/security.md)")
	return f
}

func (f *connFlags) seeds() []string {
	var out []string
	for _, s := range strings.Split(f.bootstrap, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// opts bound every wait of the client by --timeout and log it in as
// --command-config says. A bad --command-config is a usage error.
func (f *connFlags) opts() ([]kgo.Opt, error) {
	sec, err := clientSecurity(f.commandConfig)
	if err != nil {
		return nil, usageError{err}
	}
	return append([]kgo.Opt{
		kgo.DialTimeout(min(f.timeout, 10*time.Second)),
		kgo.RetryTimeout(f.timeout),
		kgo.RecordDeliveryTimeout(f.timeout),
		kgo.ClientID("holdfast-cli"),
	}, sec...), nil
}

// connect makes a client and checks within --timeout that a broker
// answers, so that a command fails with a clear error instead of waiting
// forever when nothing is there.
func (f *connFlags) connect(ctx context.Context, extra ...kgo.Opt) (*admin.Client, error) {
	seeds := f.seeds()
	if len(seeds) == 0 {
		return nil, usagef("--bootstrap: name at least one broker")
	}
	opts, err := f.opts()
	if err != nil {
		return nil, err
	}
	c, err := admin.NewClient(seeds, append(opts, extra...)...)
	if err != nil {
		return nil, usageError{err}
	}
	pctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	start := time.Now()
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(pctx, c.K); err != nil {
		c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if refusedLogin(err) {
			return nil, fmt.Errorf("%s refused this client's login: %w (--command-config)", f.bootstrap, err)
		}
		// Said as it happened: a refused connection fails in milliseconds,
		// and "within 30s" would send the user looking for a slow network.
		return nil, fmt.Errorf("%w at %s: %v (after %v, --timeout %v); is a broker running there? (--bootstrap)", errNoAnswer, f.bootstrap, err, time.Since(start).Truncate(time.Microsecond), f.timeout)
	}
	return c, nil
}

// refusedLogin reports whether a broker answered but the client could not
// log in: SASL refused, or TLS could not agree on who is who. That is
// exit code 1, not "no broker answered".
func refusedLogin(err error) bool {
	for _, e := range []error{kerr.SaslAuthenticationFailed, kerr.IllegalSaslState, kerr.UnsupportedSaslMechanism} {
		if errors.Is(err, e) {
			return true
		}
	}
	var (
		verify *tls.CertificateVerificationError
		alert  tls.AlertError
		host   x509.HostnameError
		ca     x509.UnknownAuthorityError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &host) || errors.As(err, &ca)
}

// call runs fn with a client and a context that ends at --timeout or on
// SIGINT/SIGTERM.
func (f *connFlags) call(fn func(ctx context.Context, c *admin.Client) error) error {
	ctx, stop := signalContext()
	defer stop()
	c, err := f.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	err = fn(ctx, c)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%w within --timeout %v: %v", errNoAnswer, f.timeout, err)
	}
	return err
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// kvList parses repeated key=value flags.
func kvList(flag string, kvs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range kvs {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usagef("--%s: want key=value, got %q", flag, s)
		}
		out[k] = v
	}
	return out, nil
}

// completeNames completes topic or group names by asking the broker (with
// a short timeout: a shell waits for it).
func completeNames(conn *connFlags, groups bool) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(_ *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
		opts, err := conn.opts()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := admin.NewClient(conn.seeds(), append(opts, kgo.DialTimeout(time.Second))...)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var names []string
		if groups {
			gs, _ := c.ListGroups(ctx)
			for _, g := range gs {
				names = append(names, g.Group)
			}
		} else if ts, err := c.A.ListTopics(ctx); err == nil {
			names = ts.Names()
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
