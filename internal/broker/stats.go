package broker

// PartitionStats is what the broker shows of one partition: the offsets that
// say how much is written, committed and on disk.
type PartitionStats struct {
	Topic         string
	Partition     int32
	LogStart      int64
	LogEnd        int64
	HighWatermark int64
	Durable       int64 // every offset below is fsynced
}

// PartitionStats lists every open partition.
func (b *Broker) PartitionStats() []PartitionStats {
	var out []PartitionStats
	for _, t := range b.meta.Topics() {
		for i := int32(0); i < t.Partitions; i++ {
			p := b.parts.Get(t.Name, i)
			if p == nil {
				continue
			}
			out = append(out, PartitionStats{
				Topic: t.Name, Partition: i,
				LogStart: p.LogStartOffset(), LogEnd: p.LogEndOffset(),
				HighWatermark: p.HighWatermark(), Durable: p.DurableOffset(),
			})
		}
	}
	return out
}
