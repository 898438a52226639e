package faulttest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"holdfast/internal/failpoint"
	"holdfast/internal/s3test"
	"holdfast/internal/testwait"
)

// tieredOffset is ListOffsets' special timestamp ts for partition 0.
func tieredOffset(cl *kgo.Client, topic string, ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

// TestTieredLeaderKilledWhileUploading: a node uploading a backlog of
// segments (built up while the object store was stopped with SIGSTOP) is
// killed with SIGKILL as soon as its first new upload is committed, four
// times over, so that the kills land between an upload
// and its manifest's commit, between the commit and the local delete, or
// in the middle of an upload. Every acknowledged record is read back from
// offset 0 at the end, the old ones from the object store.
func TestTieredLeaderKilledWhileUploading(t *testing.T) {
	store := s3test.Start(t, "")
	c := Start(t, Options{Nodes: 1, Loopback: true, Args: tieredArgs(store)})
	const topic, rounds, perRound = "tiered-kill", 4, 1200
	ctx := context.Background()
	resp, err := c.Admin().CreateTopics(ctx, 1, 1, map[string]*string{
		"remote.storage.enable": kmsg.StringPtr("true"), "segment.bytes": kmsg.StringPtr("4096"), "local.retention.bytes": kmsg.StringPtr("1"),
	}, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for round := 0; round < rounds; round++ {
		cl := c.Client()
		before, err := tieredOffset(cl, topic, -5)
		if err != nil {
			t.Fatal(err)
		}
		// The store stands still while the round is produced (uploads
		// wait), so that a backlog of segments builds up.
		store.Signal(syscall.SIGSTOP)
		var batch []*kgo.Record
		for i := 0; i < perRound; i++ {
			batch = append(batch, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "record-%06d-%s", next+i, strings.Repeat("x", 60))})
			if len(batch) == 20 || i == perRound-1 {
				pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				err := cl.ProduceSync(pctx, batch...).FirstErr()
				cancel()
				if err != nil {
					t.Fatalf("round %d: produce: %v", round, err)
				}
				batch = nil
			}
		}
		next += perRound
		store.Signal(syscall.SIGCONT)
		// Kill as soon as the backlog's first segment is committed: the
		// rest are being uploaded, committed or deleted locally.
		testwait.For(t, 60*time.Second, fmt.Sprintf("round %d: an upload past %d", round, before), func() error {
			got, err := tieredOffset(cl, topic, -5)
			if err == nil && got <= before {
				err = fmt.Errorf("uploaded to %d", got)
			}
			return err
		})
		c.Kill(1)
		cl.Close()
		c.Restart(1)
	}
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	testwait.For(t, 60*time.Second, "the local tier to catch up", func() error {
		local, err := tieredOffset(cl, topic, -4)
		if err == nil && local < int64(next/2) {
			err = fmt.Errorf("local log start %d", local)
		}
		return err
	})
	if earliest, err := tieredOffset(cl, topic, -2); err != nil || earliest != 0 {
		t.Fatalf("earliest offset %d (%v), want 0", earliest, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for got := 0; got < next; {
		fs := cl.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", got, next, cctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if w := fmt.Sprintf("record-%06d-", got); r.Offset != int64(got) || !strings.HasPrefix(string(r.Value), w) {
				t.Fatalf("offset %d holds %.20q, want offset %d %s", r.Offset, r.Value, got, w)
			}
			got++
		}
	}
}

// tieredArgs are the serve flags of a node uploading to store: tiered
// storage on, the upload task every 20 ms, failed uploads retried at most
// a second apart (Kafka's default is 30 s: the same mechanism, shorter),
// a request to the store given up after 3 s without progress (30 s).
func tieredArgs(store *s3test.Server) []string {
	return []string{"--remote-log-storage", "--remote-log-storage-s3-bucket", s3test.Bucket,
		"--remote-log-storage-s3-endpoint", store.Endpoint(), "--remote-log-storage-s3-region", "us-east-1",
		"--remote-log-storage-s3-path-style", "--remote-log-manager-task-interval", "20ms",
		"--remote-log-manager-task-retry-backoff-max", "1s", "--remote-log-storage-s3-io-timeout", "3s"}
}

// failpoints is the file the nodes' failpoints read (internal/failpoint).
type failpoints struct {
	t    testing.TB
	path string
}

// arm makes names the armed failpoints (none: every held step goes on).
func (f *failpoints) arm(names ...string) {
	f.t.Helper()
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		f.t.Fatal(err)
	}
}

// startTiered starts nodes with tiered storage on an object store
// (versitygw) on the cluster's ServiceHost, so that CutService can make it
// unreachable, and a failpoint file, none armed.
func startTiered(t *testing.T, opts Options) (*Cluster, *s3test.Server, *failpoints) {
	t.Helper()
	if opts.Cluster {
		if testing.Short() {
			t.Skip("cluster fault tests are skipped in -short mode")
		}
		if ok, why := ClusterModeAvailable(t); !ok {
			t.Skip("cluster mode not available yet: " + why)
		}
	}
	fp := &failpoints{t: t, path: filepath.Join(t.TempDir(), "failpoints")}
	fp.arm()
	var store *s3test.Server
	opts.Env = append(opts.Env, failpoint.EnvFile+"="+fp.path)
	own := opts.Args // after tieredArgs: they win
	opts.Args = nil
	opts.Prepare = func(c *Cluster) {
		store = s3test.Start(t, c.ServiceHost())
		c.AddArgs(tieredArgs(store)...)
		c.AddArgs(own...)
	}
	return Start(t, opts), store, fp
}

// createTiered creates topic, one partition of rf replicas, tiered, with
// segments of 4 KiB and a local tier of one byte: every uploaded segment
// leaves the local disks.
func createTiered(t testing.TB, c *Cluster, topic string, rf int16) {
	t.Helper()
	adm := c.Admin()
	// Asked again while the nodes register (INVALID_REPLICATION_FACTOR).
	testwait.For(t, 60*time.Second, "create topic "+topic, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.CreateTopics(ctx, 1, rf, map[string]*string{
			"remote.storage.enable": kmsg.StringPtr("true"), "segment.bytes": kmsg.StringPtr("4096"), "local.retention.bytes": kmsg.StringPtr("1"),
		}, topic)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	if rf > 1 {
		waitReplicasInSync(t, c, topic, 30*time.Second)
	}
}

// producer is a client for produceSeq: uncompressed, so that a segment
// of 4 KiB holds two requests of 20 records.
func producer(c *Cluster) *kgo.Client {
	return c.Client(kgo.ProducerBatchCompression(kgo.NoCompression()))
}

// produceSeq produces records [from, to) of the sequence readFromStart
// checks, 20 a request, each acknowledged (acks=all) before the next.
func produceSeq(t testing.TB, cl *kgo.Client, topic string, from, to int) {
	t.Helper()
	var batch []*kgo.Record
	for i := from; i < to; i++ {
		batch = append(batch, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "record-%06d-%s", i, strings.Repeat("x", 60))})
		if len(batch) == 20 || i == to-1 {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			err := cl.ProduceSync(ctx, batch...).FirstErr()
			cancel()
			if err != nil {
				t.Fatalf("produce records up to %d: %v", i, err)
			}
			batch = nil
		}
	}
}

// readFromStart reads topic from offset 0 with a new consumer and fails
// unless offsets 0 to n-1 hold records 0 to n-1, in order, each once.
func readFromStart(t testing.TB, c *Cluster, topic string, n int) {
	t.Helper()
	cl := c.Client(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", got, n, ctx.Err())
		}
		for _, e := range fs.Errors() {
			t.Fatalf("fetch: %v", e.Err)
		}
		for _, r := range fs.Records() {
			if w := fmt.Sprintf("record-%06d-", got); r.Offset != int64(got) || !strings.HasPrefix(string(r.Value), w) {
				t.Fatalf("offset %d holds %.20q, want offset %d %s", r.Offset, r.Value, got, w)
			}
			got++
		}
	}
}

// awaitUploaded waits until the remote log of topic/0 reaches at least
// tieredEnd (ListOffsets latest-tiered, -5) and the local tier has let go
// of the start (earliest-local, -4, above 0), while the earliest offset
// (-2) stays 0.
func awaitUploaded(t testing.TB, cl *kgo.Client, topic string, tieredEnd int64) {
	t.Helper()
	testwait.For(t, 60*time.Second, fmt.Sprintf("the remote log of %s to reach %d and the local one to let go of the start", topic, tieredEnd), func() error {
		end, err := tieredOffset(cl, topic, -5)
		var local, earliest int64
		if err == nil {
			local, err = tieredOffset(cl, topic, -4)
		}
		if err == nil {
			earliest, err = tieredOffset(cl, topic, -2)
		}
		if err == nil && earliest != 0 {
			t.Fatalf("earliest offset %d, want 0", earliest)
		}
		if err == nil && (end < tieredEnd || local <= 0) {
			err = fmt.Errorf("the remote log reaches %d, the local one starts at %d", end, local)
		}
		return err
	})
}

// offsetNow is ListOffsets' special timestamp ts for topic/0, asked
// again while the answer is an error (a leader just killed or elected).
func offsetNow(t testing.TB, cl *kgo.Client, topic string, ts int64) int64 {
	t.Helper()
	var off int64
	testwait.For(t, 60*time.Second, fmt.Sprintf("ListOffsets %d of %s", ts, topic), func() (err error) {
		off, err = tieredOffset(cl, topic, ts)
		return err
	})
	return off
}

// hitCounts counts, per node, the times each stopped at failpoint name
// (its "failpoint reached" log lines, across restarts).
func hitCounts(c *Cluster, name string) map[int]int {
	n := map[int]int{}
	for _, nd := range c.Nodes {
		for _, l := range strings.Split(c.Logs(nd.ID), "\n") {
			if strings.Contains(l, "failpoint reached") && strings.Contains(l, name) {
				n[nd.ID]++
			}
		}
	}
	return n
}

// awaitHit waits until a node stops at failpoint name once more than in
// before (hitCounts) and returns it.
func awaitHit(t testing.TB, c *Cluster, name string, before map[int]int) int {
	t.Helper()
	hit := 0
	testwait.Until(t, 60*time.Second, "a node to reach failpoint "+name, func() bool {
		for id, n := range hitCounts(c, name) {
			if n > before[id] {
				hit = id
				return true
			}
		}
		return false
	})
	return hit
}

// logCount counts node i's log lines holding msg.
func logCount(c *Cluster, i int, msg string) int { return strings.Count(c.Logs(i), msg) }

// metric reads one unlabelled sample from node i's Prometheus listener.
func metric(t testing.TB, c *Cluster, i int, name string) float64 {
	t.Helper()
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + c.Node(i).MetricsAddr + "/metrics")
	if err != nil {
		t.Fatalf("node %d metrics: %v", i, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %.200s", resp.Status, b)
	}
	if err != nil {
		t.Fatalf("node %d metrics: %v", i, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("node %d metric %q: %v", i, l, err)
			}
			return f
		}
	}
	t.Fatalf("node %d has no metric %s", i, name)
	return 0
}

// awaitMetric waits until node i's metric name satisfies ok.
func awaitMetric(t testing.TB, c *Cluster, i int, name string, ok func(float64) bool) float64 {
	t.Helper()
	var v float64
	if !testwait.Poll(60*time.Second, func() bool { v = metric(t, c, i, name); return ok(v) }) {
		t.Fatalf("node %d: %s = %v after 60s", i, name, v)
	}
	return v
}

// segmentKey splits a segment object's key into its base offset and the
// uploader's leader epoch (<...>/<base, 20 digits>-<epoch>.log).
func segmentKey(t testing.TB, key string) (base, epoch int64) {
	t.Helper()
	name := strings.TrimSuffix(path.Base(key), ".log")
	b, e, ok := strings.Cut(name, "-")
	var err1, err2 error
	base, err1 = strconv.ParseInt(b, 10, 64)
	epoch, err2 = strconv.ParseInt(e, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("segment object %q: not <base>-<epoch>.log", key)
	}
	return base, epoch
}

const uploadFailed = "segment upload failed; local disk keeps the backlog"

// TestTieredStoreKilledMidUpload: the object store is killed (SIGKILL)
// in the middle of a segment's upload, deterministically: the node stops
// at a failpoint once the segment's .log object is stored and before its
// .index is. The upload fails and is retried with backoff, the metric and
// a log line say the store is unavailable, produce goes on (the local
// disk holds the backlog), and once the store is back every segment is
// uploaded (the half-written one again, under the same key) and every
// acknowledged record is read from offset 0, the old ones from the store.
func TestTieredStoreKilledMidUpload(t *testing.T) {
	c, store, fp := startTiered(t, Options{Nodes: 1, Metrics: true})
	const topic, fpName = "tiered-store-killed", "tiered.upload.between-objects"
	createTiered(t, c, topic, 1)
	cl := producer(c)
	seen := hitCounts(c, fpName)
	fp.arm(fpName)
	produceSeq(t, cl, topic, 0, 300)
	awaitHit(t, c, fpName, seen)
	if objs := store.SegmentObjects(); len(objs) != 1 {
		t.Fatalf("segment objects %q while the first upload stands between its two objects, want one", objs)
	}
	if end := offsetNow(t, cl, topic, -5); end != -1 {
		t.Fatalf("latest tiered offset %d before any manifest, want -1", end)
	}

	store.Kill()
	failed := logCount(c, 1, uploadFailed)
	fp.arm() // the upload goes on: its .index cannot be stored
	awaitMetric(t, c, 1, "holdfast_remote_storage_unavailable", func(v float64) bool { return v == 1 })
	if logCount(c, 1, uploadFailed) == failed {
		t.Fatalf("no log line says %q", uploadFailed)
	}
	produceSeq(t, cl, topic, 300, 600) // produce does not wait for the store
	awaitMetric(t, c, 1, "holdfast_remote_copy_lag_segments", func(v float64) bool { return v > 2 })

	store.Restart()
	awaitUploaded(t, cl, topic, 450)
	awaitMetric(t, c, 1, "holdfast_remote_storage_unavailable", func(v float64) bool { return v == 0 })
	readFromStart(t, c, topic, 600)
}

// TestTieredLeaderKilledAroundManifestCommit: on three nodes, the leader
// of a tiered partition is killed with SIGKILL (1) once a segment's
// objects are stored and before the manifest naming them is proposed,
// then (2) the next leader once its manifest is committed and before the
// local tier deletes the segment; both stopped there by failpoints, so
// the kills land exactly between the steps. The first leader's objects
// are never listed (the next leader uploads the segment under its own
// epoch, another key; the test deletes the orphan before reading, so a
// manifest naming it would fail the read), and after restarts every
// acknowledged record is read from offset 0.
func TestTieredLeaderKilledAroundManifestCommit(t *testing.T) {
	c, store, fp := startTiered(t, Options{Nodes: 3, Cluster: true, Args: []string{"--auto-leader-rebalance=false"}})
	const topic = "tiered-kill-commit"
	const beforeCommit, afterCommit = "tiered.upload.before-commit", "tiered.upload.after-commit"
	createTiered(t, c, topic, 3)
	cl := producer(c)

	// (1) Uploaded, not committed.
	seen := hitCounts(c, beforeCommit)
	fp.arm(beforeCommit)
	produceSeq(t, cl, topic, 0, 300)
	first := awaitHit(t, c, beforeCommit, seen)
	orphans := store.SegmentObjects()
	if len(orphans) != 1 {
		t.Fatalf("segment objects %q at the first leader's failpoint, want one", orphans)
	}
	if end := offsetNow(t, cl, topic, -5); end != -1 {
		t.Fatalf("latest tiered offset %d before any manifest, want -1", end)
	}
	seen = hitCounts(c, afterCommit)
	fp.arm(beforeCommit, afterCommit) // the first leader stays where it is
	c.Kill(first)
	fp.arm(afterCommit)
	t.Logf("node %d killed with %s stored and not committed", first, orphans[0])

	// (2) Committed, not deleted locally.
	second := awaitHit(t, c, afterCommit, seen)
	if second == first {
		t.Fatalf("node %d stopped after a commit, but it was killed", second)
	}
	if end := offsetNow(t, cl, topic, -5); end < 0 {
		t.Fatalf("latest tiered offset %d after the second leader's commit, want >= 0", end)
	}
	if local := offsetNow(t, cl, topic, -4); local != 0 {
		t.Fatalf("earliest local offset %d before the local delete, want 0", local)
	}
	ob, oe := segmentKey(t, orphans[0])
	var mine []string
	for _, k := range store.SegmentObjects() {
		if b, e := segmentKey(t, k); b == ob && e != oe {
			mine = append(mine, k)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("segment objects %q: want the second leader's own copy of the segment at %d beside %s", store.SegmentObjects(), ob, orphans[0])
	}
	c.Restart(first)
	c.Kill(second)
	fp.arm()
	t.Logf("node %d killed with %s committed and still on its disk", second, mine[0])
	c.Restart(second)

	// The first leader's object is nobody's: without it, every record
	// is still read.
	if err := os.Remove(filepath.Join(store.Dir, s3test.Bucket, filepath.FromSlash(orphans[0]))); err != nil {
		t.Fatal(err)
	}
	produceSeq(t, cl, topic, 300, 600)
	awaitUploaded(t, cl, topic, 450)
	readFromStart(t, c, topic, 600)
}

// TestTieredLeadershipMovesMidUpload: on three nodes, the leader stands
// still (SIGSTOP, as in a long pause) after storing a segment's objects
// and before proposing the manifest that names them; another node is
// elected, uploads the same segment under its own epoch (the two keys
// differ) and commits it while the old leader still stands. Then the old
// leader goes on from where it stood, as if nothing happened: it proposes
// in a term that is over, or finds the manifest changed, and commits
// nothing, counts no upload and no error (before, a lost leadership
// counted as a failed upload and set holdfast_remote_storage_unavailable on
// a node that no longer uploads). The test deletes the old leader's object
// before every record is read from offset 0: a manifest naming it would
// fail the read.
func TestTieredLeadershipMovesMidUpload(t *testing.T) {
	c, store, fp := startTiered(t, Options{Nodes: 3, Cluster: true, Metrics: true, Args: []string{"--auto-leader-rebalance=false"}})
	const topic, fpName = "tiered-move", "tiered.upload.before-commit"
	createTiered(t, c, topic, 3)
	cl := producer(c)
	seen := hitCounts(c, fpName)
	fp.arm(fpName)
	produceSeq(t, cl, topic, 0, 300)
	old := awaitHit(t, c, fpName, seen)
	objs := store.SegmentObjects()
	if len(objs) != 1 {
		t.Fatalf("segment objects %q at the leader's failpoint, want one", objs)
	}
	oldKey := objs[0]

	seen = hitCounts(c, fpName)
	c.Pause(old)
	next := leaderOf(t, c, topic, 0, old)
	if hit := awaitHit(t, c, fpName, seen); hit != next {
		t.Fatalf("node %d reached the failpoint, want the new leader %d", hit, next)
	}
	ob, oe := segmentKey(t, oldKey)
	var newKey string
	for _, k := range store.SegmentObjects() {
		if b, e := segmentKey(t, k); b == ob && e > oe {
			newKey = k
		}
	}
	if newKey == "" {
		t.Fatalf("segment objects %q: want the new leader's copy of the segment at %d under a higher epoch than %s", store.SegmentObjects(), ob, oldKey)
	}

	// The new leader commits while the old one stands still.
	fp.arm()
	clNext, err := kgo.NewClient(kgo.SeedBrokers(c.Node(next).Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer clNext.Close()
	testwait.Until(t, 60*time.Second, fmt.Sprintf("node %d, the new leader, to commit a manifest", next), func() bool {
		return offsetNow(t, clNext, topic, -5) >= 0
	})
	// Any word of the old leader on its upload: committed, failed or
	// given up.
	outcome := func() int {
		n := 0
		for _, l := range strings.Split(c.Logs(old), "\n") {
			if strings.Contains(l, "segment upload") && strings.Contains(l, "base_offset=0 ") {
				n++
			}
		}
		return n
	}
	before := outcome()
	c.Resume(old)
	testwait.Until(t, 60*time.Second, fmt.Sprintf("node %d, the old leader, to give up its upload", old), func() bool {
		return outcome() != before
	})
	for _, m := range []string{"holdfast_remote_copy_requests_total", "holdfast_remote_copy_errors_total", "holdfast_remote_storage_unavailable"} {
		if v := metric(t, c, old, m); v != 0 {
			t.Errorf("node %d, the old leader: %s = %v, want 0: it uploaded nothing that counts, and the store never failed", old, m, v)
		}
	}
	if err := os.Remove(filepath.Join(store.Dir, s3test.Bucket, filepath.FromSlash(oldKey))); err != nil {
		t.Fatal(err)
	}
	produceSeq(t, cl, topic, 300, 600)
	awaitUploaded(t, cl, topic, 450)
	readFromStart(t, c, topic, 600)
	// What the old leader made of its upload (for the record).
	for _, l := range strings.Split(c.Logs(old), "\n") {
		if strings.Contains(l, "segment upload") && strings.Contains(l, "base_offset=0 ") {
			t.Logf("node %d, the old leader: %.400s", old, l)
		}
	}
}

// TestTieredStoreUnreachable: the object store becomes unreachable from
// the node (CutService: its packets vanish, nothing is refused) in the
// middle of an upload, stopped at a failpoint between its two objects,
// while producing goes on. Every produce is acknowledged; the upload
// under way fails within the I/O timeout (--remote-log-storage-s3-io-timeout;
// before it, a connection took 30 s to fail, three times over, and a
// request on a connection whose packets vanished waited a minute for its
// answer); uploads keep failing (the test waits for three failed
// attempts: seconds where the issue says minutes, the same mechanism); the
// metric and a log line say so and the local disk holds the backlog; once
// the cut is healed, uploads resume by themselves and every record is
// read from offset 0.
func TestTieredStoreUnreachable(t *testing.T) {
	// A request gives up after a second without progress: each failed
	// attempt (minio-go tries three times) takes a few seconds.
	c, _, fp := startTiered(t, Options{Nodes: 1, Metrics: true, Args: []string{"--remote-log-storage-s3-io-timeout", "1s"}})
	if !c.Netns() {
		t.Skip("the object store's network cut needs network namespaces (root with iproute2)")
	}
	const topic = "tiered-unreachable"
	createTiered(t, c, topic, 1)
	cl := producer(c)
	produceSeq(t, cl, topic, 0, 200)
	awaitUploaded(t, cl, topic, 100)

	const fpName = "tiered.upload.between-objects"
	seen := hitCounts(c, fpName)
	fp.arm(fpName)
	produceSeq(t, cl, topic, 200, 300)
	awaitHit(t, c, fpName, seen)
	failed := logCount(c, 1, uploadFailed)
	errs := metric(t, c, 1, "holdfast_remote_copy_errors_total")
	c.CutService(1)
	fp.arm()
	n := 300
	for attempts := 0; attempts < 3; attempts++ {
		produceSeq(t, cl, topic, n, n+100)
		n += 100
		prev := errs
		errs = awaitMetric(t, c, 1, "holdfast_remote_copy_errors_total", func(v float64) bool { return v > prev })
	}
	if v := metric(t, c, 1, "holdfast_remote_storage_unavailable"); v != 1 {
		t.Fatalf("holdfast_remote_storage_unavailable = %v with the store cut off, want 1", v)
	}
	if logCount(c, 1, uploadFailed) == failed {
		t.Fatalf("no log line says %q", uploadFailed)
	}
	lag := metric(t, c, 1, "holdfast_remote_copy_lag_segments")
	if lag < 5 {
		t.Fatalf("%v segments wait for their upload after %d records produced with the store cut off, want a backlog", lag, n-300)
	}
	t.Logf("store cut off: %d records produced and acknowledged, %v segments wait on the local disk", n-300, lag)
	for _, l := range strings.Split(c.Logs(1), "\n") {
		if strings.Contains(l, uploadFailed) {
			t.Logf("%.100s ... %s", l, l[max(0, len(l)-200):])
		}
	}

	c.HealService(1)
	awaitUploaded(t, cl, topic, int64(n-100))
	awaitMetric(t, c, 1, "holdfast_remote_storage_unavailable", func(v float64) bool { return v == 0 })
	awaitMetric(t, c, 1, "holdfast_remote_copy_lag_segments", func(v float64) bool { return v == 0 })
	readFromStart(t, c, topic, n)
}
