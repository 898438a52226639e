package broker

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/wire"
)

// servedBefore is what the broker served when its handlers were registered
// by one init() per API file (dumped from that registry at f337cf1): key,
// versions, node-to-node. A new API or version is added here and in the
// table; one dropped by mistake fails TestHandlersTable.
var servedBefore = []struct {
	key      int16
	min, max int16
	internal bool
}{
	{0, 3, 13, false}, // Produce
	{1, 4, 18, false}, // Fetch
	{2, 1, 11, false}, // ListOffsets (v11: -6, KIP-1023)
	{3, 0, 13, false}, // Metadata
	{8, 0, 9, false},  // OffsetCommit
	{9, 0, 9, false},  // OffsetFetch
	{10, 0, 6, false}, // FindCoordinator
	{11, 0, 9, false}, // JoinGroup
	{12, 0, 4, false}, // Heartbeat
	{13, 0, 5, false}, // LeaveGroup
	{14, 0, 5, false}, // SyncGroup
	{15, 0, 6, false}, // DescribeGroups
	{16, 0, 5, false}, // ListGroups
	{18, 0, 4, false}, // ApiVersions
	{19, 0, 7, false}, // CreateTopics
	{20, 0, 6, false}, // DeleteTopics
	{21, 0, 2, false}, // DeleteRecords
	{22, 0, 5, false}, // InitProducerID
	{23, 0, 4, false}, // OffsetForLeaderEpoch
	{24, 0, 5, false}, // AddPartitionsToTxn
	{25, 0, 4, false}, // AddOffsetsToTxn
	{26, 0, 5, false}, // EndTxn
	{27, 0, 1, true},  // WriteTxnMarkers
	{28, 0, 5, false}, // TxnOffsetCommit
	{29, 0, 3, false}, // DescribeACLs
	{30, 0, 3, false}, // CreateACLs
	{31, 0, 3, false}, // DeleteACLs
	{32, 0, 4, false}, // DescribeConfigs
	{33, 0, 2, false}, // AlterConfigs
	{34, 1, 2, false}, // AlterReplicaLogDirs
	{35, 1, 4, false}, // DescribeLogDirs
	{37, 0, 3, false}, // CreatePartitions
	{42, 0, 2, false}, // DeleteGroups
	{43, 0, 2, false}, // ElectLeaders
	{44, 0, 1, false}, // IncrementalAlterConfigs
	{45, 0, 1, false}, // AlterPartitionAssignments
	{46, 0, 0, false}, // ListPartitionReassignments
	{47, 0, 0, false}, // OffsetDelete
	{48, 0, 1, false}, // DescribeClientQuotas
	{49, 0, 1, false}, // AlterClientQuotas
	{50, 0, 0, false}, // DescribeUserSCRAMCredentials
	{51, 0, 0, false}, // AlterUserSCRAMCredentials
	{55, 0, 2, false}, // DescribeQuorum
	{56, 0, 3, true},  // AlterPartition
	{57, 0, 2, false}, // UpdateFeatures
	{60, 0, 2, false}, // DescribeCluster
	{61, 0, 0, false}, // DescribeProducers
	{62, 0, 4, true},  // BrokerRegistration
	{63, 0, 2, true},  // BrokerHeartbeat
	{64, 0, 0, false}, // UnregisterBroker
	{65, 0, 0, false}, // DescribeTransactions
	{66, 0, 2, false}, // ListTransactions
	{67, 0, 0, true},  // AllocateProducerIDs
	{68, 0, 1, false}, // ConsumerGroupHeartbeat
	{69, 0, 1, false}, // ConsumerGroupDescribe
	{75, 0, 0, false}, // DescribeTopicPartitions
	{76, 1, 1, false}, // ShareGroupHeartbeat
	{77, 1, 1, false}, // ShareGroupDescribe
	{78, 1, 2, false}, // ShareFetch
	{79, 1, 2, false}, // ShareAcknowledge
	{80, 0, 1, false}, // AddRaftVoter
	{81, 0, 0, false}, // RemoveRaftVoter
	{84, 0, 0, true},  // ReadShareGroupState
	{85, 0, 1, true},  // WriteShareGroupState
	{90, 0, 1, false}, // DescribeShareGroupOffsets
	{91, 0, 0, false}, // AlterShareGroupOffsets
	{92, 0, 0, false}, // DeleteShareGroupOffsets
}

// TestHandlersTable: the table is in strict API-key order (so no key twice),
// and ApiVersions (wire.SupportedKeys, what handleApiVersions answers)
// advertises exactly what was served before the table: every API on the
// inter-broker listener, the node-to-node ones nowhere else.
func TestHandlersTable(t *testing.T) {
	for i := 1; i < len(handlers); i++ {
		if handlers[i-1].key >= handlers[i].key {
			t.Errorf("handlers: %s (%d) is listed before %s (%d)", kmsg.NameForKey(handlers[i-1].key.Int16()),
				handlers[i-1].key, kmsg.NameForKey(handlers[i].key.Int16()), handlers[i].key)
		}
	}
	type served struct{ key, min, max int16 }
	for _, internalListener := range []bool{true, false} {
		var want, got []served
		for _, s := range servedBefore {
			if internalListener || !s.internal {
				want = append(want, served{s.key, s.min, s.max})
			}
		}
		l := &wire.Listener{Name: "T", Protocol: wire.Plaintext, Internal: internalListener}
		for _, k := range wire.SupportedKeys((*Broker)(nil), l) {
			got = append(got, served{k.ApiKey, k.MinVersion, k.MaxVersion})
		}
		if !slices.Equal(got, want) {
			t.Errorf("internal listener %v: ApiVersions advertises\n%v\nwant\n%v", internalListener, got, want)
		}
	}
}
