package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/auth"
	"holdfast/internal/metadata"
	"holdfast/internal/wire"
)

// AlterUserScramCredentials v0 (KIP-554): the client sends the salted
// password (never the password); the broker derives the stored and server
// keys and commits them to the metadata, so every node can authenticate
// the user. This is what kafka-configs.sh --alter --add-config
// 'SCRAM-SHA-512=[password=...]' --entity-type users and kadm send. Needs
// ALTER on the cluster.
func (b *Broker) handleAlterUserSCRAMCredentials(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := req.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	var users []string
	results := map[string]*kmsg.AlterUserSCRAMCredentialsResponseResult{}
	result := func(u string) *kmsg.AlterUserSCRAMCredentialsResponseResult {
		if res, ok := results[u]; ok {
			return res
		}
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = u
		results[u] = &res
		users = append(users, u)
		return &res
	}
	setErr := func(u string, code *kerr.Error, msg string) {
		if res := result(u); res.ErrorCode == 0 {
			res.ErrorCode, res.ErrorMessage = code.Code, kmsg.StringPtr(msg)
		}
	}
	for _, d := range req.Deletions {
		result(d.Name)
	}
	for _, u := range req.Upsertions {
		result(u.Name)
	}
	answer := func() kmsg.Response {
		for _, u := range users {
			resp.Results = append(resp.Results, *results[u])
		}
		return resp
	}
	if !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter) {
		for _, u := range users {
			setErr(u, kerr.ClusterAuthorizationFailed, "")
		}
		return wire.Respond(answer())
	}

	// Kafka's checks, per user: a user named twice for one mechanism is a
	// DUPLICATE_RESOURCE, and every change of that user is refused.
	seen := map[metadata.ScramKey]int{}
	for _, d := range req.Deletions {
		seen[metadata.ScramKey{User: d.Name, Mechanism: auth.ScramMechanismName(d.Mechanism)}]++
	}
	for _, u := range req.Upsertions {
		seen[metadata.ScramKey{User: u.Name, Mechanism: auth.ScramMechanismName(u.Mechanism)}]++
	}
	for k, n := range seen {
		if n > 1 {
			setErr(k.User, kerr.DuplicateResource, "A user credential cannot be altered twice in the same request")
		}
	}
	var dels []metadata.ScramKey
	for _, d := range req.Deletions {
		mech := auth.ScramMechanismName(d.Mechanism)
		switch {
		case d.Name == "":
			setErr(d.Name, kerr.UnacceptableCredential, "Username must not be empty")
		case mech == "":
			setErr(d.Name, kerr.UnsupportedSaslMechanism, fmt.Sprintf("Unknown SCRAM mechanism %d", d.Mechanism))
		default:
			if _, ok := b.meta.ScramCredential(d.Name, mech); !ok {
				setErr(d.Name, kerr.ResourceNotFound, "Attempt to delete a user credential that does not exist")
			}
			dels = append(dels, metadata.ScramKey{User: d.Name, Mechanism: mech})
		}
	}
	var ups []auth.ScramCredential
	for _, u := range req.Upsertions {
		mech := auth.ScramMechanismName(u.Mechanism)
		switch {
		case u.Name == "":
			setErr(u.Name, kerr.UnacceptableCredential, "Username must not be empty")
		case mech == "":
			setErr(u.Name, kerr.UnsupportedSaslMechanism, fmt.Sprintf("Unknown SCRAM mechanism %d", u.Mechanism))
		default:
			c, err := auth.ScramFromSaltedPassword(u.Name, mech, u.SaltedPassword, u.Salt, int(u.Iterations))
			if err != nil {
				setErr(u.Name, kerr.UnacceptableCredential, err.Error())
				continue
			}
			ups = append(ups, c)
		}
	}
	// Only the users without an error change.
	ok := func(u string) bool { return results[u].ErrorCode == 0 }
	var cmd metadata.Command
	cmd.Op = metadata.OpScram
	for _, d := range dels {
		if ok(d.User) {
			cmd.ScramDeletions = append(cmd.ScramDeletions, d)
		}
	}
	for _, c := range ups {
		if ok(c.User) {
			cmd.Scram = append(cmd.Scram, c)
		}
	}
	if len(cmd.ScramDeletions) == 0 && len(cmd.Scram) == 0 {
		return wire.Respond(answer())
	}
	return func(ctx context.Context) kmsg.Response {
		if fresp, forwarded, err := b.cluster.ForwardToController(ctx, req); forwarded {
			if err != nil {
				code, msg := kafkaError(err)
				for _, u := range users {
					if ok(u) {
						results[u].ErrorCode, results[u].ErrorMessage = code, msg
					}
				}
				return answer()
			}
			return fresp
		}
		code, msg := kafkaError(b.commitSecurity(ctx, cmd))
		for _, u := range users {
			if ok(u) {
				results[u].ErrorCode, results[u].ErrorMessage = code, msg
				if code == 0 {
					b.log.Info("SCRAM credentials altered", "user", u, "by", r.Principal.String())
				}
			}
		}
		return answer()
	}
}
