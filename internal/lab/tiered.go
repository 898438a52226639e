package lab

// Tiered storage: every replica's disk is lost, and the topic is restored
// from the object store alone (docs/tiered-storage.md, Restore).

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/freeport"
	"holdfast/internal/tiered"
	"holdfast/internal/verify"
)

// tieredRestore: a 3-node cluster uploads a tiered topic's closed segments
// to an S3-compatible object store (versitygw, a process, as the tiered
// tests run it); then every disk of every node is lost, and a new cluster
// on the same bucket restores the topic from the objects. What was
// uploaded comes back at its offsets; what was not (the active segments)
// is lost, and that is the whole loss: the row passes when the records
// lost are exactly the acknowledged records the remote log did not hold
// (counted before the disks went, from each record's acknowledged offset
// and the remote log's end, ListOffsets -5), with no duplicates. Kafka's
// tiered storage cannot do it (its remote log's metadata is in a topic on
// the lost disks), so there is no Kafka-settings row. Without versitygw
// the row is skipped, and says why (under CI it is an error).
func tieredRestore(ctx context.Context, e *env) []Row {
	rows := []Row{{Setting: "tiered storage, restored from the object store", Default: true, Expect: ExpectNotUploaded,
		Takeaway: "with tiered storage, a cluster that lost every disk still has every record that was uploaded: a restore from the bucket brings them back at their offsets, and loses exactly what was not uploaded yet"}}
	bin, err := versitygw()
	if err != nil {
		if os.Getenv("CI") == "true" {
			return failedAll(rows, err)
		}
		rows[0].Skipped = err.Error()
		rows[0].Fault = "not run: " + err.Error()
		return rows
	}
	rows[0] = e.timed(rows[0], func(r *Row) error {
		store, err := startS3(ctx, bin, filepath.Join(e.dir, "object-store"))
		if err != nil {
			return err
		}
		defer store.stop()
		restoreEnv := setCredentials()
		defer restoreEnv()
		cfg := tiered.Config{Enabled: true, Bucket: s3Bucket, Prefix: "lab/", Endpoint: "http://" + store.addr,
			Region: "us-east-1", PathStyle: true, TaskInterval: 100 * time.Millisecond, RetryBackoffMax: time.Second}
		c, err := e.cluster(ctx, clusterOptions{tiered: &cfg})
		if err != nil {
			return err
		}
		const topic, partitions = "tiered-restore", 2
		configs := map[string]*string{
			"remote.storage.enable": ptr("true"),
			"segment.bytes":         ptr("16384"),
		}
		if err := c.createTopic(ctx, topic, partitions, configs); err != nil {
			return err
		}
		// Small uncompressed batches: the row needs several segments (the
		// active one is the loss), and one batch fills a segment alone.
		cl, err := producer(c, topic, "all", true, kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(4<<10))
		if err != nil {
			return err
		}
		run := verify.NewRun(topic)
		p := run.StartProducer(cl, verify.ProducerConfig{Records: int64(e.n)})
		r.follow(run)
		p.Stop(60 * time.Second)
		cl.Close()
		r.mark("producer done", false)
		if run.Acked() == 0 {
			return fmt.Errorf("nothing acknowledged: %v", run.Failures())
		}
		if err := c.awaitUploads(ctx); err != nil {
			return err
		}
		ends, err := c.tieredEnds(ctx, topic, partitions)
		if err != nil {
			return err
		}
		uploaded := 0
		for _, a := range run.Acks() {
			if a.Offset >= ends[a.Partition] {
				r.NotUploaded++
			} else {
				uploaded++
			}
		}
		r.mark(fmt.Sprintf("%d acknowledged records uploaded, %d not yet", uploaded, r.NotUploaded), false)
		if e.cfg.noFault {
			r.Fault = "no fault"
			r.NotUploaded = 0 // nothing is lost without the fault
			return r.check(ctx, c, run, verify.CheckOptions{CommitWait: -1})
		}
		c.close()
		for _, n := range c.nodes {
			if err := os.RemoveAll(n.cfg.DataDir); err != nil {
				return err
			}
		}
		r.mark("every disk of the 3 nodes lost", true)
		r.Injected = uploaded > 0
		r.Fault = fmt.Sprintf("every disk of the 3 nodes deleted after %d acknowledgements, of which %d were uploaded and %d not yet (the active segments); the topic restored into a new cluster from the bucket",
			run.Acked(), uploaded, r.NotUploaded)

		c2, err := e.cluster(ctx, clusterOptions{tiered: &cfg})
		if err != nil {
			return err
		}
		configs["remote.storage.restore.from"] = ptr(topic)
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		// The partition count given, as an operator who knew it would (the
		// uploads record it too: TestTieredRestoreKeepsPartitionCount
		// restores without it).
		err = c2.createTopic(cctx, topic, partitions, configs)
		cancel()
		if err != nil {
			return err
		}
		if err := c2.awaitRestored(ctx, topic, partitions); err != nil {
			return err
		}
		r.mark("topic restored from the object store", false)
		return r.check(ctx, c2, run, verify.CheckOptions{CommitWait: -1})
	})
	return rows
}

func ptr(s string) *string { return &s }

// awaitUploads waits until every node's upload task has passed twice with
// nothing closed left to upload.
func (c *cluster) awaitUploads(ctx context.Context) error {
	passes := map[int32]int64{}
	for _, n := range c.nodes {
		if b := n.broker(); b != nil && b.TieredStats() != nil {
			passes[n.id] = b.TieredStats().Passes.Load()
		}
	}
	for {
		done := true
		for _, n := range c.nodes {
			b := n.broker()
			if b == nil || b.TieredStats() == nil {
				continue
			}
			st := b.TieredStats()
			if st.Passes.Load() < passes[n.id]+2 || st.CopyLagSegments.Load() > 0 {
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the uploads: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tieredEnds is, per partition, the offset after the remote log
// (ListOffsets -5, plus one).
func (c *cluster) tieredEnds(ctx context.Context, topic string, partitions int32) (map[int32]int64, error) {
	out := map[int32]int64{}
	offs, err := c.listOffsets(ctx, topic, partitions, -5)
	for p, o := range offs {
		out[p] = o + 1
	}
	return out, err
}

// awaitRestored waits until every partition of a restored topic answers
// its earliest offset (the restored manifest committed).
func (c *cluster) awaitRestored(ctx context.Context, topic string, partitions int32) error {
	for {
		_, err := c.listOffsets(ctx, topic, partitions, -2)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the restored remote log: %w (%v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listOffsets asks ListOffsets' special timestamp ts of every partition
// (the client sends each to its leader).
func (c *cluster) listOffsets(ctx context.Context, topic string, partitions int32, ts int64) (map[int32]int64, error) {
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = p, ts, -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	if len(out) != int(partitions) {
		return nil, fmt.Errorf("%d of %d partitions answered", len(out), partitions)
	}
	return out, nil
}

// The object store the row runs: versitygw with its POSIX backend, and
// the credentials the brokers find in the environment (the standard
// chain; they are never a setting).
const (
	s3Bucket = "holdfast-lab"
	s3Access = "holdfastlab"
	s3Secret = "holdfastlabsecret"
)

// versitygw finds the server as the tiered tests do: on PATH, or where
// `go install` (and .ci/run) puts it.
func versitygw() (string, error) {
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin, nil
	}
	if p := filepath.Join(build.Default.GOPATH, "bin", "versitygw"); fileExists(p) {
		return p, nil
	}
	return "", errors.New("versitygw (the S3-compatible server this row runs) is not installed: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0, as .ci/run does")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

type s3Server struct {
	addr   string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
}

// startS3 runs versitygw on a free port over dir, with one bucket.
func startS3(ctx context.Context, bin, dir string) (*s3Server, error) {
	if err := os.MkdirAll(filepath.Join(dir, s3Bucket), 0o755); err != nil {
		return nil, err
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--access", s3Access, "--secret", s3Secret, "--port", addr, "--quiet", "posix", dir)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting versitygw: %w", err)
	}
	s := &s3Server{addr: addr, cmd: cmd, exited: make(chan struct{})}
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(s.exited) }()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-ctx.Done():
			s.stop()
			return nil, fmt.Errorf("versitygw on %s: %w", addr, err)
		case <-s.exited:
			// A server that cannot start (a port taken, a bad flag) is an
			// error now, not a wait for the row's whole deadline.
			return nil, fmt.Errorf("versitygw exited before listening on %s: %v", addr, waitErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *s3Server) stop() {
	s.cmd.Process.Kill()
	<-s.exited
}

// setCredentials puts the object store's credentials in the environment
// for the row, and returns what puts the old values back.
func setCredentials() func() {
	var undo []func()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": s3Access, "AWS_SECRET_ACCESS_KEY": s3Secret, "AWS_SESSION_TOKEN": ""} {
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		undo = append(undo, func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}
