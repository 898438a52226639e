package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/admin"
)

func init() { addCommand(newACLCmd) }

// newACLCmd manages ACLs with CreateAcls, DescribeAcls and DeleteAcls, in
// kafka-acls.sh's terms: a principal is allowed or denied operations on a
// resource (topic, group, transactional id, the cluster), from a host.
func newACLCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "acl",
		Short: "Create, list and delete ACLs (needs authorizer.class.name on the brokers)",
	}
	conn := clientCommand(c)
	c.AddCommand(aclCreateCmd(conn), aclListCmd(conn), aclDeleteCmd(conn))
	return c
}

// aclFlags select ACLs: who, what, on which resource.
type aclFlags struct {
	allow, deny, host, topic, group, txn string
	ops                                  []string
	cluster, prefixed                    bool
}

func (f *aclFlags) register(c *cobra.Command, what string) {
	c.Flags().StringVar(&f.allow, "allow", "", what+" ALLOW ACLs of this principal, e.g. User:alice (User:* is every user)")
	c.Flags().StringVar(&f.deny, "deny", "", what+" DENY ACLs of this principal")
	c.Flags().StringVar(&f.host, "host", "", "the client IP the ACL is for (default: every host, *)")
	c.Flags().StringSliceVar(&f.ops, "operation", nil, "operations, comma-separated or repeated: read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write, all")
	c.Flags().StringVar(&f.topic, "topic", "", "topic name (a prefix with --prefixed; * is every topic)")
	c.Flags().StringVar(&f.group, "group", "", "consumer group (a prefix with --prefixed; * is every group)")
	c.Flags().StringVar(&f.txn, "transactional-id", "", "transactional id (a prefix with --prefixed; * is every one)")
	c.Flags().BoolVar(&f.cluster, "cluster", false, "the cluster resource (kafka-cluster)")
	c.Flags().BoolVar(&f.prefixed, "prefixed", false, "the names are prefixes (PREFIXED pattern); default LITERAL")
}

func (f *aclFlags) hasResource() bool {
	return f.topic != "" || f.group != "" || f.txn != "" || f.cluster
}

// builder turns the flags into kadm's ACL builder; for list and delete
// (filter) what is not given matches anything.
func (f *aclFlags) builder(filter bool) (*kadm.ACLBuilder, error) {
	for _, p := range []string{f.allow, f.deny} {
		if p != "" && !strings.HasPrefix(p, "User:") {
			return nil, usagef("principal %q: want User:name (or User:*)", p)
		}
	}
	b := kadm.NewACLs()
	var ops []kadm.ACLOperation
	for _, o := range f.ops {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		op, err := kmsg.ParseACLOperation(strings.ToLower(o))
		if err != nil || op == kmsg.ACLOperationUnknown || op == kmsg.ACLOperationAny && !filter {
			return nil, usagef("--operation %q: want read, write, create, delete, alter, describe, cluster_action, describe_configs, alter_configs, idempotent_write or all", o)
		}
		ops = append(ops, op)
	}
	if filter && len(ops) == 0 {
		ops = []kadm.ACLOperation{kadm.OpAny}
	}
	var hosts []string
	if f.host != "" {
		hosts = []string{f.host}
	}
	if f.allow != "" {
		b.Allow(f.allow).AllowHosts(hosts...)
	}
	if f.deny != "" {
		b.Deny(f.deny).DenyHosts(hosts...)
	}
	if filter && f.allow == "" && f.deny == "" {
		b.Allow().AllowHosts(hosts...).Deny().DenyHosts(hosts...)
	}
	if f.topic != "" {
		b.Topics(f.topic)
	}
	if f.group != "" {
		b.Groups(f.group)
	}
	if f.txn != "" {
		b.TransactionalIDs(f.txn)
	}
	if f.cluster {
		b.Clusters()
	}
	pattern := kadm.ACLPatternLiteral
	if f.prefixed {
		pattern = kadm.ACLPatternPrefixed
	}
	b.Operations(ops...).ResourcePatternType(pattern)
	return b, nil
}

func aclCreateCmd(conn *connFlags) *cobra.Command {
	var f aclFlags
	c := &cobra.Command{
		Use:   "create (--allow | --deny) PRINCIPAL --operation OPS RESOURCE",
		Short: "Allow or deny a principal operations on a topic, group, transactional id or the cluster",
		Long: `Create ACLs (CreateAcls; the broker needs ALTER on the cluster): one per
operation and resource given. RESOURCE is --topic, --group,
--transactional-id (each a name, * for all, or a prefix with --prefixed)
and/or --cluster.`,
		Example: `  holdfast acl create --allow User:alice --operation read,write --topic orders
  holdfast acl create --allow User:alice --operation read --group billing- --prefixed
  holdfast acl create --deny User:mallory --operation all --topic '*'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (f.allow == "") == (f.deny == "") {
				return usagef("acl create: give one of --allow PRINCIPAL or --deny PRINCIPAL")
			}
			if len(f.ops) == 0 {
				return usagef("acl create: give --operation")
			}
			if !f.hasResource() {
				return usagef("acl create: give a resource: --topic, --group, --transactional-id or --cluster")
			}
			b, err := f.builder(false)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.CreateACLs(ctx, b)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				for _, r := range res {
					if r.Err != nil {
						w.Flush()
						return fmt.Errorf("%s %s %s on %s: %w%s", r.Permission, r.Principal, r.Operation, resourceName(r.Type, r.Pattern, r.Name), r.Err, detail(r.ErrMessage))
					}
					fmt.Fprintf(w, "created\t%s\t%s\t%s\t%s\thost=%s\n", r.Permission, r.Principal, r.Operation, resourceName(r.Type, r.Pattern, r.Name), r.Host)
				}
				return w.Flush()
			})
		},
	}
	f.register(c, "create")
	return c
}

func aclListCmd(conn *connFlags) *cobra.Command {
	var f aclFlags
	c := &cobra.Command{
		Use:     "list [--topic T | --group G | --transactional-id X | --cluster] [--allow P | --deny P]",
		Aliases: []string{"ls"},
		Short:   "List ACLs (all, or those of a resource or principal)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := f.builder(true)
			if err != nil {
				return err
			}
			if !f.hasResource() {
				b.AnyResource()
			}
			if !f.prefixed {
				b.ResourcePatternType(kadm.ACLPatternAny) // literal and prefixed ACLs of the name
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.DescribeACLs(ctx, b)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				fmt.Fprintln(w, "PERMISSION\tPRINCIPAL\tOPERATION\tRESOURCE\tHOST")
				for _, r := range res {
					if r.Err != nil {
						w.Flush()
						return fmt.Errorf("%w%s", r.Err, detail(r.ErrMessage))
					}
					for _, d := range r.Described {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", d.Permission, d.Principal, d.Operation, resourceName(d.Type, d.Pattern, d.Name), d.Host)
					}
				}
				return w.Flush()
			})
		},
	}
	f.register(c, "only")
	return c
}

func aclDeleteCmd(conn *connFlags) *cobra.Command {
	var f aclFlags
	c := &cobra.Command{
		Use:   "delete RESOURCE [--allow P | --deny P] [--operation OPS]",
		Short: "Delete the ACLs of a resource (of a principal, of operations)",
		Long: `Delete ACLs (DeleteAcls; the broker needs ALTER on the cluster) of a
resource: --topic, --group, --transactional-id (a literal name, or a prefix
ACL with --prefixed) or --cluster; narrowed by --allow/--deny, --operation
and --host. Prints what was deleted.`,
		Example: `  holdfast acl delete --topic orders --allow User:alice
  holdfast acl delete --group billing- --prefixed`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !f.hasResource() {
				return usagef("acl delete: give a resource: --topic, --group, --transactional-id or --cluster")
			}
			b, err := f.builder(true)
			if err != nil {
				return err
			}
			return conn.call(func(ctx context.Context, c *admin.Client) error {
				res, err := c.A.DeleteACLs(ctx, b)
				if err != nil {
					return err
				}
				w := tw(cmd.OutOrStdout())
				n := 0
				for _, r := range res {
					if r.Err != nil {
						w.Flush()
						return fmt.Errorf("%w%s", r.Err, detail(r.ErrMessage))
					}
					for _, d := range r.Deleted {
						n++
						fmt.Fprintf(w, "deleted\t%s\t%s\t%s\t%s\thost=%s\n", d.Permission, d.Principal, d.Operation, resourceName(d.Type, d.Pattern, d.Name), d.Host)
					}
				}
				if n == 0 {
					fmt.Fprintln(w, "no ACL matched")
				}
				return w.Flush()
			})
		},
	}
	f.register(c, "only")
	return c
}

// resourceName is how ACL output names a resource: TYPE:PATTERN:NAME.
func resourceName(t kmsg.ACLResourceType, p kadm.ACLPattern, name string) string {
	return fmt.Sprintf("%s:%s:%s", strings.ToLower(t.String()), strings.ToLower(p.String()), name)
}
