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

// Feature levels (KIP-584) that ApiVersions v3+ advertises, and that
// UpdateFeatures may finalize within the supported range. Clients act on
// them: franz-go and the Java client switch to KIP-890 part 2 (implicit
// AddPartitionsToTxn, an epoch bump per transaction) at
// transaction.version 2. A level UpdateFeatures set is committed through
// the metadata log (metadata/features.go), so every node finalizes the
// same level and a restart keeps it; a feature never set is at its default.
//
//   - metadata.version 7 (3.3-IV3): the lowest level a Kafka 4 cluster runs
//     at, and the only one Holdfast claims. Later levels gate KRaft record
//     formats and controller features (eligible leader replicas, dynamic
//     quorums, ...) that Holdfast's metadata log does not have.
//   - transaction.version 0..2, default 2: at 2 a transactional Produce v12+
//     adds its partition to the transaction (the partition leader asks the
//     coordinator), TxnOffsetCommit v5 adds the group's partition, and EndTxn
//     v5 bumps the producer epoch on every commit and abort (KIP-890 part
//     2). Below 2 those versions behave as the versions before them: the
//     client adds partitions itself, epochs move only on InitProducerId.
//   - group.version 0..1, default 1: KIP-848's consumer group protocol
//     (ConsumerGroupHeartbeat, ConsumerGroupDescribe); at 0 a heartbeat
//     answers UNSUPPORTED_VERSION, as Kafka with the feature off.
//   - share.version 0..1, default 1: KIP-932's share groups
//     (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge); at 0 they answer
//     UNSUPPORTED_VERSION, as Kafka with the feature off.
//   - kraft.version 1 (KIP-853), fixed: the controller quorum is the
//     metadata Raft group's committed membership and changes online
//     (AddRaftVoter, RemoveRaftVoter). Level 0, Kafka's static quorum, is
//     not offered: every Holdfast quorum can change.
var features = []featureDef{
	{name: "metadata.version", minLevel: 7, maxLevel: 7, def: 7},
	{name: "transaction.version", minLevel: 0, maxLevel: 2, def: 2},
	{name: "group.version", minLevel: 0, maxLevel: 1, def: 1},
	{name: "share.version", minLevel: 0, maxLevel: 1, def: 1},
	{name: "kraft.version", minLevel: 1, maxLevel: 1, def: 1},
}

type featureDef struct {
	name               string
	minLevel, maxLevel int16 // supported
	def                int16 // finalized when UpdateFeatures never set it
}

func featureByName(name string) (featureDef, bool) {
	for _, f := range features {
		if f.name == name {
			return f, true
		}
	}
	return featureDef{}, false
}

// featureLevel is the finalized level of a feature (0 if unknown).
func (b *Broker) featureLevel(name string) int16 {
	if l, ok := b.meta.FeatureLevel(name); ok {
		return l
	}
	f, _ := featureByName(name)
	return f.def
}

// txnV2 reports whether transaction.version 2 (KIP-890 part 2) is
// finalized.
func (b *Broker) txnV2() bool { return b.featureLevel("transaction.version") >= 2 }

// addFeatures fills ApiVersions v3+'s supported and finalized features.
// As Kafka, a feature finalized at level 0 is not listed as finalized.
func (b *Broker) addFeatures(resp *kmsg.ApiVersionsResponse) {
	if resp.Version < 3 {
		return
	}
	for _, f := range features {
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = f.name, f.minLevel, f.maxLevel
		resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		level := b.featureLevel(f.name)
		if level == 0 {
			continue
		}
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = f.name, level, level
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
	}
	// The levels change only by a metadata-log entry, so the applied
	// offset is an epoch that grows whenever they change.
	resp.FinalizedFeaturesEpoch = max(b.meta.Applied(), 0)
}

// UpdateFeatures v0-1 (KIP-584; API 57): finalize feature levels within
// what every node supports (one binary: the table above), committed through
// the metadata log by the controller. Needs ALTER on the cluster. The
// checks and messages are Kafka's FeatureControlManager's: an unknown
// feature or a level outside the supported range is INVALID_UPDATE_VERSION,
// as is a downgrade without the SAFE_DOWNGRADE/UNSAFE_DOWNGRADE upgrade
// type (v0: AllowDowngrade). v2 answers without per-feature results: the
// first failure is the top-level error (Kafka 4's shape).
func (b *Broker) handleUpdateFeaturesV(ctx context.Context, r *wire.Request) wire.Reply {
	reply := b.handleUpdateFeatures(ctx, r)
	if r.Body.(*kmsg.UpdateFeaturesRequest).Version < 2 {
		return reply
	}
	return thenEdit(reply, func(out kmsg.Response) {
		resp := out.(*kmsg.UpdateFeaturesResponse)
		for _, res := range resp.Results {
			if resp.ErrorCode == 0 && res.ErrorCode != 0 {
				resp.ErrorCode, resp.ErrorMessage = res.ErrorCode, res.ErrorMessage
			}
		}
		resp.Results = nil
	})
}

// Kafka's FeatureUpdate.UpgradeType.
const (
	upgradeTypeUpgrade         = 1
	upgradeTypeSafeDowngrade   = 2
	upgradeTypeUnsafeDowngrade = 3
)

func (b *Broker) handleUpdateFeatures(_ context.Context, r *wire.Request) wire.Reply {
	req := r.Body.(*kmsg.UpdateFeaturesRequest)
	resp := req.ResponseKind().(*kmsg.UpdateFeaturesResponse)
	if !b.forwardedBy(r) && !b.authorizeCluster(r, auth.OpAlter) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		resp.ErrorMessage = kmsg.StringPtr(kerr.ClusterAuthorizationFailed.Description)
		return wire.Respond(resp)
	}
	seen := map[string]bool{}
	for _, u := range req.FeatureUpdates {
		if seen[u.Feature] {
			resp.ErrorCode = kerr.InvalidRequest.Code
			resp.ErrorMessage = kmsg.StringPtr("Feature " + u.Feature + " appears more than once in the request.")
			return wire.Respond(resp)
		}
		seen[u.Feature] = true
	}
	levels := map[string]int16{}
	failed := false
	for _, u := range req.FeatureUpdates {
		res := kmsg.NewUpdateFeaturesResponseResult()
		res.Feature = u.Feature
		if msg := b.checkFeatureUpdate(req.Version, u); msg != "" {
			res.ErrorCode = kerr.InvalidUpdateVersion.Code
			res.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Invalid update version %d for feature %s. %s", u.MaxVersionLevel, u.Feature, msg))
			failed = true
		} else {
			levels[u.Feature] = u.MaxVersionLevel
		}
		resp.Results = append(resp.Results, res)
	}
	// Kafka's controller applies the updates of one request all or none.
	if failed || req.ValidateOnly || len(levels) == 0 {
		if failed {
			for i := range resp.Results {
				if resp.Results[i].ErrorCode == 0 {
					resp.Results[i].ErrorCode = kerr.InvalidUpdateVersion.Code
					resp.Results[i].ErrorMessage = kmsg.StringPtr("Not attempted: another update of the request failed.")
				}
			}
		}
		return wire.Respond(resp)
	}
	return func(ctx context.Context) kmsg.Response {
		if fresp, forwarded, err := b.cluster.ForwardToController(ctx, req); forwarded {
			if err != nil {
				resp.ErrorCode, resp.ErrorMessage = kafkaError(err)
				return resp
			}
			return fresp
		}
		code, msg := kafkaError(b.cluster.Propose(ctx, metadata.Command{Op: metadata.OpFeatures, Features: levels}))
		for i := range resp.Results {
			resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = code, msg
		}
		if code == 0 {
			b.log.Info("features finalized", "levels", levels, "by", r.Principal.String())
		}
		return resp
	}
}

// checkFeatureUpdate returns why an update may not be made ("" if it may).
func (b *Broker) checkFeatureUpdate(version int16, u kmsg.UpdateFeaturesRequestFeatureUpdate) string {
	typ := u.UpgradeType
	if version == 0 {
		typ = upgradeTypeUpgrade
		if u.AllowDowngrade {
			typ = upgradeTypeSafeDowngrade
		}
	}
	if typ < upgradeTypeUpgrade || typ > upgradeTypeUnsafeDowngrade {
		return "The controller does not support the given upgrade type."
	}
	f, ok := featureByName(u.Feature)
	if !ok {
		return "The controller does not support the given feature."
	}
	if u.MaxVersionLevel < 0 {
		return "A feature version cannot be less than 0."
	}
	if u.MaxVersionLevel < f.minLevel || u.MaxVersionLevel > f.maxLevel {
		return fmt.Sprintf("Local controller %d only supports versions %d-%d", b.cfg.NodeID, f.minLevel, f.maxLevel)
	}
	if cur := b.featureLevel(u.Feature); u.MaxVersionLevel < cur && typ == upgradeTypeUpgrade {
		return "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade."
	}
	return ""
}
