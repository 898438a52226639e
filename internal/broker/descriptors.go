package broker

import "holdfast/internal/storage"

// Descriptors: a node holds descriptors for its data files (segments,
// indexes, checkpoints) besides its connections. At 20,000 partitions on a
// node whose limit was 20,000, the partition files took them all and
// accept(2) failed with EMFILE: no client could connect at all. The budget
// splits the open-file limit: connections (max.connections) and a fixed
// reserve first, the rest for data files (log.max.open.files), which hold
// descriptors through a bounded cache (storage.CachedFS: idle files are
// closed and reopened on use), so the partition count is not bounded by
// descriptors (max.broker.partitions is unlimited by default, as Kafka's).

// descriptorReserve is kept besides connections and data files: listeners,
// the admin and metrics endpoints, Raft peer connections, directory
// fsyncs, the Go runtime's own.
const descriptorReserve = 256

// minDataFiles is the least budget of data files worth running with.
const minDataFiles = 64

// DescriptorBudget splits an open-file limit nofile between maxConns
// connections and the node's data files: it returns the data files that
// may be open at once, and whether the limit covers the connections
// (false: nofile leaves fewer than minDataFiles after maxConns and the
// reserve; the data files then get half of nofile, and connections are
// bounded by the descriptors left before max.connections).
func DescriptorBudget(nofile uint64, maxConns int) (files int, covered bool) {
	n := int(min(nofile, 1<<30))
	files = n - max(maxConns, 0) - descriptorReserve
	covered = files >= minDataFiles
	if !covered {
		files = n / 2
	}
	return files, covered
}

// OpenFiles reports the partitions' data files' descriptors held and their
// bound (log.max.open.files; 0 with none).
func (b *Broker) OpenFiles() (open, budget int64) {
	open, budget, _ = storage.OpenFiles(b.dataFS)
	return open, budget
}

// FileCacheForcedOpens reports the data files' descriptors opened past
// log.max.open.files because every open one was in use at that moment.
func (b *Broker) FileCacheForcedOpens() int64 { return storage.FDCacheForcedOpens(b.dataFS) }

// FileCacheActivity reports the data files' idle descriptors closed to
// stay within log.max.open.files, and the files opened again since.
func (b *Broker) FileCacheActivity() (evictions, reopens int64) {
	_, _, evictions, reopens, _ = storage.FDCacheStats(b.dataFS)
	return evictions, reopens
}
