package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// handlers is every API this broker serves, in API-key order
// (TestHandlersTable checks the order and the list): the one place to see
// what is served and at which versions. Each handler lives in its API's
// file, with what it does and why the versions are these.
var handlers = []handler{
	{kmsg.Produce, 3, 13, clients, (*Broker).handleProduce},
	{kmsg.Fetch, 4, 18, clients, (*Broker).handleFetch},
	{kmsg.ListOffsets, 1, 11, clients, (*Broker).handleListOffsets},
	{kmsg.Metadata, 0, 13, clients, (*Broker).handleMetadata},
	{kmsg.OffsetCommit, 0, 9, clients, (*Broker).handleOffsetCommit},
	{kmsg.OffsetFetch, 0, 9, clients, (*Broker).handleOffsetFetch},
	{kmsg.FindCoordinator, 0, 6, clients, (*Broker).handleFindCoordinator},
	{kmsg.JoinGroup, 0, 9, clients, (*Broker).handleJoinGroup},
	{kmsg.Heartbeat, 0, 4, clients, (*Broker).handleHeartbeat},
	{kmsg.LeaveGroup, 0, 5, clients, (*Broker).handleLeaveGroup},
	{kmsg.SyncGroup, 0, 5, clients, (*Broker).handleSyncGroup},
	{kmsg.DescribeGroups, 0, 6, clients, (*Broker).handleDescribeGroups},
	{kmsg.ListGroups, 0, 5, clients, (*Broker).handleListGroups},
	{kmsg.ApiVersions, 0, 4, clients, (*Broker).handleApiVersions},
	{kmsg.CreateTopics, 0, 7, clients, (*Broker).handleCreateTopics},
	{kmsg.DeleteTopics, 0, 6, clients, (*Broker).handleDeleteTopics},
	{kmsg.DeleteRecords, 0, 2, clients, (*Broker).handleDeleteRecords},
	{kmsg.InitProducerID, 0, 5, clients, (*Broker).handleInitProducerID},
	{kmsg.OffsetForLeaderEpoch, 0, 4, clients, (*Broker).handleOffsetForLeaderEpoch},
	{kmsg.AddPartitionsToTxn, 0, 5, clients, (*Broker).handleAddPartitionsToTxn},
	{kmsg.AddOffsetsToTxn, 0, 4, clients, (*Broker).handleAddOffsetsToTxn},
	{kmsg.EndTxn, 0, 5, clients, (*Broker).handleEndTxn},
	{kmsg.WriteTxnMarkers, 0, 1, nodes, (*Broker).handleWriteTxnMarkers},
	{kmsg.TxnOffsetCommit, 0, 5, clients, (*Broker).handleTxnOffsetCommit},
	{kmsg.DescribeACLs, 0, 3, clients, (*Broker).handleDescribeACLs},
	{kmsg.CreateACLs, 0, 3, clients, (*Broker).handleCreateACLs},
	{kmsg.DeleteACLs, 0, 3, clients, (*Broker).handleDeleteACLs},
	{kmsg.DescribeConfigs, 0, 4, clients, (*Broker).handleDescribeConfigs},
	{kmsg.AlterConfigs, 0, 2, clients, (*Broker).handleAlterConfigs},
	{kmsg.AlterReplicaLogDirs, 1, 2, clients, (*Broker).handleAlterReplicaLogDirs},
	{kmsg.DescribeLogDirs, 1, 4, clients, (*Broker).handleDescribeLogDirs},
	{kmsg.CreatePartitions, 0, 3, clients, (*Broker).handleCreatePartitions},
	{kmsg.DeleteGroups, 0, 2, clients, (*Broker).handleDeleteGroups},
	{kmsg.ElectLeaders, 0, 2, clients, (*Broker).handleElectLeaders},
	{kmsg.IncrementalAlterConfigs, 0, 1, clients, (*Broker).handleIncrementalAlterConfigs},
	{kmsg.AlterPartitionAssignments, 0, 1, clients, (*Broker).handleAlterPartitionReassignments},
	{kmsg.ListPartitionReassignments, 0, 0, clients, (*Broker).handleListPartitionReassignments},
	{kmsg.OffsetDelete, 0, 0, clients, (*Broker).handleOffsetDelete},
	{kmsg.DescribeClientQuotas, 0, 1, clients, (*Broker).handleDescribeClientQuotas},
	{kmsg.AlterClientQuotas, 0, 1, clients, (*Broker).handleAlterClientQuotas},
	{kmsg.DescribeUserSCRAMCredentials, 0, 0, clients, (*Broker).handleDescribeUserSCRAMCredentials},
	{kmsg.AlterUserSCRAMCredentials, 0, 0, clients, (*Broker).handleAlterUserSCRAMCredentials},
	{kmsg.DescribeQuorum, 0, 2, clients, (*Broker).handleDescribeQuorum},
	{kmsg.AlterPartition, 0, 3, nodes, (*Broker).handleAlterPartition},
	{kmsg.UpdateFeatures, 0, 2, clients, (*Broker).handleUpdateFeaturesV},
	{kmsg.DescribeCluster, 0, 2, clients, (*Broker).handleDescribeCluster},
	{kmsg.DescribeProducers, 0, 0, clients, (*Broker).handleDescribeProducers},
	{kmsg.BrokerRegistration, 0, 4, nodes, (*Broker).handleBrokerRegistration},
	{kmsg.BrokerHeartbeat, 0, 2, nodes, (*Broker).handleBrokerHeartbeat},
	{kmsg.UnregisterBroker, 0, 0, clients, (*Broker).handleUnregisterBroker},
	{kmsg.DescribeTransactions, 0, 0, clients, (*Broker).handleDescribeTransactions},
	{kmsg.ListTransactions, 0, 2, clients, (*Broker).handleListTransactions},
	{kmsg.AllocateProducerIDs, 0, 0, nodes, (*Broker).handleAllocateProducerIDs},
	{kmsg.ConsumerGroupHeartbeat, 0, 1, clients, (*Broker).handleConsumerGroupHeartbeat},
	{kmsg.ConsumerGroupDescribe, 0, 1, clients, (*Broker).handleConsumerGroupDescribe},
	{kmsg.DescribeTopicPartitions, 0, 0, clients, (*Broker).handleDescribeTopicPartitions},
	{kmsg.ShareGroupHeartbeat, 1, 1, clients, (*Broker).handleShareGroupHeartbeat},
	{kmsg.ShareGroupDescribe, 1, 1, clients, (*Broker).handleShareGroupDescribe},
	{kmsg.ShareFetch, 1, 2, clients, (*Broker).handleShareFetch},
	{kmsg.ShareAcknowledge, 1, 2, clients, (*Broker).handleShareAcknowledge},
	{kmsg.AddRaftVoter, 0, 1, clients, (*Broker).handleAddRaftVoter},
	{kmsg.RemoveRaftVoter, 0, 0, clients, (*Broker).handleRemoveRaftVoter},
	{kmsg.ReadShareGroupState, 0, 0, nodes, (*Broker).handleReadShareGroupState},
	{kmsg.WriteShareGroupState, 0, 1, nodes, (*Broker).handleWriteShareGroupState},
	{kmsg.DescribeShareGroupOffsets, 0, 1, clients, (*Broker).handleDescribeShareGroupOffsets},
	{kmsg.AlterShareGroupOffsets, 0, 0, clients, (*Broker).handleAlterShareGroupOffsets},
	{kmsg.DeleteShareGroupOffsets, 0, 0, clients, (*Broker).handleDeleteShareGroupOffsets},
}

// handler is one row of the table.
type handler struct {
	key      kmsg.Key
	min, max int16
	who      audience
	fn       handlerFunc
}

// audience is who an API is served to.
type audience uint8

const (
	// clients: every listener, anyone (ACLs still apply in the handler).
	clients audience = iota
	// nodes: a node-to-node API (KRaft's broker-to-controller APIs,
	// WriteTxnMarkers, share-group state): served and advertised only on
	// the inter-broker listener and answered only to nodes (security.go).
	nodes
)

func init() {
	for _, h := range handlers {
		register(h)
	}
}
