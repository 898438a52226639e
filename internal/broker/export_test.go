package broker

import "holdfast/internal/cluster"

// MoveController asks this broker, if it leads the metadata group, to hand
// that leadership to node to (tests: there is no Kafka API that moves the
// controller).
func (b *Broker) MoveController(to int32) error {
	return b.cluster.Host().TransferLeader(cluster.MetadataGroup, uint64(to))
}

// QuorumVoters is the controller quorum as this broker applied it.
func (b *Broker) QuorumVoters() (voters, learners []int32) { return b.cluster.QuorumVoters() }

// DirectoryID is the data directory id this broker registers.
func (b *Broker) DirectoryID() string { return b.cluster.Identity().DirectoryID.String() }
