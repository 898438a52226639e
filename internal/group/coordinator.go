// Package group is the consumer group coordinator for Kafka's classic
// group protocol.
package group

// Coordinator runs every consumer group of this node.
type Coordinator struct{}
