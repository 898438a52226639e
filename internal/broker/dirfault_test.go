package broker_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"holdfast/internal/records"
	"holdfast/internal/storage"
	"holdfast/internal/testwait"
)

// dirFaultRun produces raw batches of unique values and remembers which
// were acknowledged, per topic.
type dirFaultRun struct {
	t     *testing.T
	cb    *crashBroker
	cl    *kgo.Client
	seq   int32
	acked map[string][]string
	gone  map[string][]string // values of a deleted topic: never read again
}

// produce sends one batch of 2 records to topic[0] and returns the
// partition's error code; an acknowledged batch's values are remembered.
func (r *dirFaultRun) produce(topic string) int16 {
	r.t.Helper()
	r.seq++
	p := produceRaw(r.t, r.cl, topic, rawBatch(r.t, -1, -1, r.seq, 2, records.CodecNone))
	if p.ErrorCode == 0 {
		r.acked[topic] = append(r.acked[topic], fmt.Sprintf("v%d-0", r.seq), fmt.Sprintf("v%d-1", r.seq))
	}
	return p.ErrorCode
}

// faultAcrossRestart writes to topic bad, injects a fault, restarts
// (power cut) and checks that bad answers KAFKA_STORAGE_ERROR (or
// NOT_LEADER while its group is down) while healthy keeps serving.
func (r *dirFaultRun) faultAcrossRestart(adm *kadm.Client, what string, inject func()) {
	createTopic(r.t, adm, "bad")
	r.mustProduce("bad")
	inject()
	r.cb.powerCut()
	r.cl = r.cb.client()
	r.mustProduce("healthy")
	if code := r.produce("bad"); code != kerr.KafkaStorageError.Code && code != kerr.NotLeaderForPartition.Code {
		r.t.Fatalf("produce to a partition whose %s: %v, want KAFKA_STORAGE_ERROR", what, kerr.ErrorForCode(code))
	}
	r.mustProduce("healthy")
	r.cb.fs.ClearErrors()
}

func (r *dirFaultRun) mustProduce(topic string) {
	r.t.Helper()
	if code := r.produce(topic); code != 0 {
		r.t.Fatalf("produce to %s: %v", topic, kerr.ErrorForCode(code))
	}
}

// produceUntilOK produces until topic takes a batch (the repair loop
// reopens an offline replica), failing after a minute.
func (r *dirFaultRun) produceUntilOK(topic string) {
	r.t.Helper()
	var code int16 = -1
	if !testwait.Poll(60*time.Second, func() bool { code = r.produce(topic); return code == 0 }) {
		r.t.Fatalf("%s never took a batch again: %v", topic, kerr.ErrorForCode(code))
	}
}

// check reads every topic back: every acknowledged value is there exactly
// once (unacknowledged ones may be there too, once).
func (r *dirFaultRun) check() {
	r.t.Helper()
	for topic, acked := range r.acked {
		got := r.cb.values(topic, false, len(acked))
		seen := map[string]int{}
		for _, v := range got {
			seen[v]++
		}
		for _, v := range got {
			if seen[v] > 1 {
				r.t.Fatalf("%s: %q read %d times", topic, v, seen[v])
			}
		}
		for _, v := range acked {
			if seen[v] == 0 {
				r.t.Fatalf("%s: acknowledged %q lost (read %v)", topic, v, got)
			}
		}
		for _, v := range r.gone[topic] {
			if seen[v] > 0 {
				r.t.Fatalf("%s: %q of the deleted topic of that name is read (read %v)", topic, v, got)
			}
		}
	}
}

// TestDirectoryFaults: a directory operation of one partition fails
// (mkdir of its directory, the rename or the directory fsync of a
// checkpoint, the removal of a deleted topic's directory): that partition
// answers KAFKA_STORAGE_ERROR, the others keep serving, and after a power
// cut (which also drops every directory change not fsynced) every
// acknowledged record is there once.
func TestDirectoryFaults(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(r *dirFaultRun, adm *kadm.Client)
	}{
		{"mkdir", func(r *dirFaultRun, adm *kadm.Client) {
			r.cb.fs.InjectError(storage.OpMkdir, "/data/bad-0", syscall.EMFILE)
			createTopic(r.t, adm, "bad")
			if code := r.produce("bad"); code != kerr.KafkaStorageError.Code {
				r.t.Fatalf("produce to a partition whose directory could not be made: %v, want KAFKA_STORAGE_ERROR", kerr.ErrorForCode(code))
			}
			r.mustProduce("healthy")
			r.cb.fs.ClearErrors()
			r.produceUntilOK("bad")
		}},
		{"rename", func(r *dirFaultRun, adm *kadm.Client) {
			// The next epoch's checkpoint: a restart begins one.
			r.faultAcrossRestart(adm, "checkpoint rename fails", func() {
				r.cb.fs.InjectError(storage.OpRename, "/data/bad-0/", syscall.EIO)
			})
		}},
		{"syncdir", func(r *dirFaultRun, adm *kadm.Client) {
			r.faultAcrossRestart(adm, "directory fsync fails", func() {
				r.cb.fs.InjectErrorPath(storage.OpSyncDir, "/data/bad-0", syscall.EIO)
			})
		}},
		{"removeall", func(r *dirFaultRun, adm *kadm.Client) {
			createTopic(r.t, adm, "bad")
			r.mustProduce("bad")
			r.cb.fs.InjectError(storage.OpRemoveAll, "/data/bad-0", syscall.EIO)
			if _, err := adm.DeleteTopic(testCtx(r.t), "bad"); err != nil {
				r.t.Fatal(err)
			}
			r.gone["bad"], r.acked["bad"] = r.acked["bad"], nil
			r.mustProduce("healthy")
			// The same name again: it starts empty.
			createTopic(r.t, adm, "bad")
			r.produceUntilOK("bad")
			r.mustProduce("healthy")
			r.cb.fs.ClearErrors()
		}},
		{"delete-syncdir", func(r *dirFaultRun, adm *kadm.Client) {
			// The data directory's fsync after the rename aside fails:
			// the deletion is finished later, durably, and the topic
			// re-created with the name never shows the old records.
			createTopic(r.t, adm, "bad")
			r.mustProduce("bad")
			r.cb.fs.InjectErrorPath(storage.OpSyncDir, "/data", syscall.EIO)
			if _, err := adm.DeleteTopic(testCtx(r.t), "bad"); err != nil {
				r.t.Fatal(err)
			}
			r.gone["bad"], r.acked["bad"] = r.acked["bad"], nil
			r.cb.fs.ClearErrors()
			r.mustProduce("healthy")
			createTopic(r.t, adm, "bad")
			r.produceUntilOK("bad")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cb := startCrashBroker(t, 3)
			r := &dirFaultRun{t: t, cb: cb, cl: cb.client(), acked: map[string][]string{}, gone: map[string][]string{}}
			adm := kadm.NewClient(cb.client())
			createTopic(t, adm, "healthy")
			r.mustProduce("healthy")
			c.run(r, adm)
			cb.powerCut()
			r.check()
		})
	}
}

func createTopic(t *testing.T, adm *kadm.Client, name string) {
	t.Helper()
	resp, err := adm.CreateTopic(testCtx(t), 1, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}
