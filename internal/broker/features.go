package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Feature levels (KIP-584) that ApiVersions v3+ advertises. Holdfast
// advertises a feature only at a level whose behaviour it has, since clients
// act on them: franz-go and the Java client switch to KIP-890 part 2
// (implicit AddPartitionsToTxn, an epoch bump per transaction) at
// transaction.version 2.
//
//   - metadata.version 7 (3.3-IV3): the lowest level a Kafka 4 cluster runs
//     at, and the only one Holdfast claims. Later levels gate KRaft record
//     formats and controller features (eligible leader replicas, dynamic
//     quorums, ...) that Holdfast's metadata log does not have.
//   - transaction.version: not advertised (level 0, Kafka's behaviour before
//     KIP-890 part 2; part 1's verification needs no feature).
//   - group.version 1: KIP-848's consumer group protocol
//     (ConsumerGroupHeartbeat, ConsumerGroupDescribe) is served.
//   - kraft.version: not advertised (level 0: a static controller quorum).
//
// There is no UpdateFeatures: the levels are fixed by the binary.
var features = []struct {
	name             string
	minLevel, levels int16 // supported: minLevel..levels; finalized: levels
}{
	{"metadata.version", 7, 7},
	{"group.version", 0, 1},
}

// addFeatures fills ApiVersions v3+'s supported and finalized features.
func (b *Broker) addFeatures(resp *kmsg.ApiVersionsResponse) {
	if resp.Version < 3 {
		return
	}
	for _, f := range features {
		sf := kmsg.NewApiVersionsResponseSupportedFeature()
		sf.Name, sf.MinVersion, sf.MaxVersion = f.name, f.minLevel, f.levels
		resp.SupportedFeatures = append(resp.SupportedFeatures, sf)
		ff := kmsg.NewApiVersionsResponseFinalizedFeature()
		ff.Name, ff.MinVersionLevel, ff.MaxVersionLevel = f.name, f.levels, f.levels
		resp.FinalizedFeatures = append(resp.FinalizedFeatures, ff)
	}
	// The levels never change, so any epoch that does not go backwards
	// will do: the metadata log's applied offset.
	resp.FinalizedFeaturesEpoch = max(b.meta.Applied(), 0)
}
