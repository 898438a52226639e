package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

func init() { addCommand(newQuotaCmd) }

// newQuotaCmd manages client quotas with AlterClientQuotas and
// DescribeClientQuotas, as kafka-configs.sh --entity-type users/clients/ips
// does: --user/--user-defaults and --client/--client-defaults (or
// --ip/--ip-defaults) name the entity, --add-config and --delete-config
// change its quotas.
func newQuotaCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "quota",
		Short: "Set, remove and describe client quotas (producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate; connection_creation_rate of an IP)",
		Long: `Client quotas limit a user, a client id, or a user's client id. A client over
its quota is throttled: its responses carry throttle_time_ms and the broker
reads nothing more from its connection for that long.

The quota that applies to a (user, client id) is the first set of, in order:
  --user U --client C, --user U --client-defaults, --user U,
  --user-defaults --client C, --user-defaults --client-defaults,
  --user-defaults, --client C, --client-defaults.
A quota on a user alone is shared by all its client ids, one on a client id
alone by every user with it.

An IP address (--ip A, or --ip-defaults for every address without its own)
has one quota, connection_creation_rate (KIP-612): new connections per
second; the broker holds a connection past it unanswered for the throttle
time, then closes it.`,
	}
	conn := clientCommand(c)
	c.AddCommand(quotaAlterCmd(conn), quotaDescribeCmd(conn))
	return c
}

// quotaEntityFlags name an entity, kafka-configs' way.
type quotaEntityFlags struct {
	user, client, ip                         string
	userDefaults, clientDefaults, ipDefaults bool
}

func (f *quotaEntityFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.user, "user", "", "the user (the principal's name: a SASL user, a certificate's mapped name, ANONYMOUS)")
	c.Flags().StringVar(&f.client, "client", "", "the client id")
	c.Flags().BoolVar(&f.userDefaults, "user-defaults", false, "the default for every user (<default>)")
	c.Flags().BoolVar(&f.clientDefaults, "client-defaults", false, "the default for every client id (<default>)")
	c.Flags().StringVar(&f.ip, "ip", "", "a client IP address (KIP-612 connection_creation_rate; alone, not with --user or --client)")
	c.Flags().BoolVar(&f.ipDefaults, "ip-defaults", false, "the default for every client IP address (<default>)")
}

func (f *quotaEntityFlags) check() error {
	if f.user != "" && f.userDefaults {
		return usagef("give --user or --user-defaults, not both")
	}
	if f.client != "" && f.clientDefaults {
		return usagef("give --client or --client-defaults, not both")
	}
	if f.ip != "" && f.ipDefaults {
		return usagef("give --ip or --ip-defaults, not both")
	}
	if (f.ip != "" || f.ipDefaults) && (f.user != "" || f.userDefaults || f.client != "" || f.clientDefaults) {
		return usagef("an ip entity stands alone: --ip/--ip-defaults cannot go with --user or --client")
	}
	return nil
}

// entity is the entity the flags name (for alter: at least one side).
func (f *quotaEntityFlags) entity() kadm.ClientQuotaEntity {
	var e kadm.ClientQuotaEntity
	switch {
	case f.user != "":
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "user", Name: kmsg.StringPtr(f.user)})
	case f.userDefaults:
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "user"})
	}
	switch {
	case f.client != "":
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "client-id", Name: kmsg.StringPtr(f.client)})
	case f.clientDefaults:
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "client-id"})
	}
	switch {
	case f.ip != "":
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "ip", Name: kmsg.StringPtr(f.ip)})
	case f.ipDefaults:
		e = append(e, kadm.ClientQuotaEntityComponent{Type: "ip"})
	}
	return e
}

// filter is the describe filter the flags name: nothing matches
// everything.
func (f *quotaEntityFlags) filter() []kadm.DescribeClientQuotaComponent {
	var comps []kadm.DescribeClientQuotaComponent
	add := func(typ, name string, def bool) {
		switch {
		case name != "":
			comps = append(comps, kadm.DescribeClientQuotaComponent{Type: typ, MatchName: kmsg.StringPtr(name), MatchType: kmsg.QuotasMatchTypeExact})
		case def:
			comps = append(comps, kadm.DescribeClientQuotaComponent{Type: typ, MatchType: kmsg.QuotasMatchTypeDefault})
		}
	}
	add("user", f.user, f.userDefaults)
	add("client-id", f.client, f.clientDefaults)
	add("ip", f.ip, f.ipDefaults)
	return comps
}

// parseQuotaConfigs reads --add-config: key=value pairs, comma-separated.
func parseQuotaConfigs(pairs []string) ([]kadm.AlterClientQuotaOp, error) {
	var ops []kadm.AlterClientQuotaOp
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usagef("--add-config %q: want key=value", p)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, usagef("--add-config %s: %q is not a number", k, v)
		}
		ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Value: f})
	}
	return ops, nil
}

func quotaAlterCmd(conn *connFlags) *cobra.Command {
	var (
		ent          quotaEntityFlags
		add, del     []string
		validateOnly bool
	)
	c := &cobra.Command{
		Use:   "alter (--user U | --user-defaults) and/or (--client C | --client-defaults) --add-config k=v,... --delete-config k,...",
		Short: "Set or remove quotas of a user, a client id, or both (AlterClientQuotas)",
		Long: `Set (--add-config) or remove (--delete-config) quotas of one entity, through
the controller's metadata log: every broker applies them. The broker needs
ALTER_CONFIGS on the cluster. Keys: producer_byte_rate and consumer_byte_rate
(bytes per second, whole numbers), request_percentage (percent of one
request-handler thread), controller_mutation_rate (partitions created or
deleted per second).`,
		Example: `  holdfast quota alter --user alice --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
  holdfast quota alter --client-defaults --add-config request_percentage=50
  holdfast quota alter --user alice --client reporting --add-config controller_mutation_rate=5
  holdfast quota alter --user alice --delete-config producer_byte_rate`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ent.check(); err != nil {
				return err
			}
			e := ent.entity()
			if len(e) == 0 {
				return usagef("name the entity: --user, --user-defaults, --client and/or --client-defaults, or --ip or --ip-defaults")
			}
			if len(add) == 0 && len(del) == 0 {
				return usagef("give --add-config and/or --delete-config")
			}
			ops, err := parseQuotaConfigs(add)
			if err != nil {
				return err
			}
			for _, k := range del {
				ops = append(ops, kadm.AlterClientQuotaOp{Key: k, Remove: true})
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				alter := c.A.AlterClientQuotas
				if validateOnly {
					alter = c.A.ValidateAlterClientQuotas
				}
				res, err := alter(ctx, []kadm.AlterClientQuotaEntry{{Entity: e, Ops: ops}})
				if err == nil && len(res) == 1 && res[0].Err != nil {
					err = fmt.Errorf("%w%s", res[0].Err, detail(res[0].ErrMessage))
				}
				if err != nil {
					return fmt.Errorf("quotas of %s: %w", entityString(e), err)
				}
				verb := "altered"
				if validateOnly {
					verb = "validated"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s quotas of %s\n", verb, entityString(e))
				return nil
			})
		},
	}
	ent.register(c)
	c.Flags().StringSliceVar(&add, "add-config", nil, "quotas to set, key=value (comma-separated or repeated)")
	c.Flags().StringSliceVar(&del, "delete-config", nil, "quota keys to remove (comma-separated or repeated)")
	c.Flags().BoolVar(&validateOnly, "validate-only", false, "check the change without making it")
	return c
}

func quotaDescribeCmd(conn *connFlags) *cobra.Command {
	var (
		ent    quotaEntityFlags
		strict bool
	)
	c := &cobra.Command{
		Use:   "describe [--user U | --user-defaults] [--client C | --client-defaults] [--strict]",
		Short: "List quotas, every entity's or those matching the flags (DescribeClientQuotas)",
		Long: `List the quotas of the entities that match: with no flag every entity;
--user alice matches alice alone and alice with any client id (--strict:
alice alone). The broker needs DESCRIBE_CONFIGS on the cluster.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := ent.check(); err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.DescribeClientQuotas(ctx, strict, ent.filter())
				if err != nil {
					return err
				}
				type line struct{ entity, key, value string }
				var lines []line
				for _, q := range res {
					for _, v := range q.Values {
						lines = append(lines, line{entityString(q.Entity), v.Key, strconv.FormatFloat(v.Value, 'f', -1, 64)})
					}
				}
				sort.Slice(lines, func(i, j int) bool {
					if lines[i].entity != lines[j].entity {
						return lines[i].entity < lines[j].entity
					}
					return lines[i].key < lines[j].key
				})
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "ENTITY\tQUOTA\tVALUE")
				for _, l := range lines {
					fmt.Fprintf(w, "%s\t%s\t%s\n", l.entity, l.key, l.value)
				}
				return w.Flush()
			})
		},
	}
	ent.register(c)
	c.Flags().BoolVar(&strict, "strict", false, "only entities with exactly the types given (no broader matches)")
	return c
}

// entityString prints an entity as kafka-configs does: user=alice,client-id=<default>.
func entityString(e kadm.ClientQuotaEntity) string {
	parts := make([]string, len(e))
	for i, c := range e {
		n := "<default>"
		if c.Name != nil {
			n = *c.Name
		}
		parts[i] = c.Type + "=" + n
	}
	return strings.Join(parts, ",")
}
