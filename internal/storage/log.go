package storage

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"holdfast/internal/records"
)

// Errors returned by Log.
var (
	ErrOffsetOutOfRange = errors.New("storage: offset out of range")
	ErrNotBoundary      = errors.New("storage: offset is not a batch boundary")
	ErrClosed           = errors.New("storage: log closed")
)

var errNotImplemented = errors.New("storage: not implemented yet")

// Syncer runs group-commit fsync cycles for all logs of a node.
type Syncer struct{}

func NewSyncer(logger *slog.Logger) *Syncer { return &Syncer{} }
func (s *Syncer) Close() error            { return nil }

// Options are a log's collaborators.
type Options struct {
	FS     FS
	Syncer *Syncer
	Logger *slog.Logger
	Now    func() time.Time
}

// AppendInfo describes an appended batch.
type AppendInfo struct {
	BaseOffset, LastOffset int64
	MaxTimestamp           int64
	Size                   int
}

// Log is one partition's segmented log.
type Log struct{}

func Open(dir string, cfg Config, opts Options) (*Log, error) { return nil, errNotImplemented }
func (l *Log) Append(batch []byte, leaderEpoch int32) (AppendInfo, error) {
	return AppendInfo{}, errNotImplemented
}
func (l *Log) AppendReplicated(batch []byte) (AppendInfo, error) {
	return AppendInfo{}, errNotImplemented
}
func (l *Log) WaitDurable(ctx context.Context, offset int64) error { return errNotImplemented }
func (l *Log) Sync() error                                         { return errNotImplemented }
func (l *Log) StartOffset() int64                                  { return 0 }
func (l *Log) EndOffset() int64                                    { return 0 }
func (l *Log) DurableOffset() int64                                { return 0 }

// Slice is a byte range of whole batches in a segment file.
type Slice struct {
	File File
	Pos  int64
	Size int
}

func (s Slice) Bytes() ([]byte, error) { return nil, errNotImplemented }
func (s Slice) Release()               {}

func (l *Log) Read(offset, maxOffset int64, maxBytes int) (Slice, error) {
	return Slice{}, errNotImplemented
}
func (l *Log) OffsetForTimestamp(ts int64) (int64, int64, error) { return -1, -1, errNotImplemented }
func (l *Log) MaxTimestamp() (timestamp, offset int64)          { return -1, -1 }
func (l *Log) Truncate(offset int64) error                      { return errNotImplemented }
func (l *Log) DeleteBefore(offset int64) error                  { return errNotImplemented }
func (l *Log) EnforceRetention() (int, error)                   { return 0, errNotImplemented }
func (l *Log) SetConfig(cfg Config)                             {}
func (l *Log) Config() Config                                   { return Config{} }
func (l *Log) EndOffsetForEpoch(epoch int32) (int32, int64)     { return -1, -1 }
func (l *Log) Scan(from int64, fn func(h records.Header, batch []byte) error) error {
	return errNotImplemented
}
func (l *Log) Close() error  { return nil }
func (l *Log) Delete() error { return errNotImplemented }

// CrashFS is an in-memory FS that can forget what was not fsynced.
type CrashFS struct{ osFS }

func NewCrashFS(seed int64) *CrashFS { return &CrashFS{} }
