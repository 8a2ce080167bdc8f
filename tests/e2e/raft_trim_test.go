package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRaftKafkaDeleteRecordsLeaderKill: Kafka DeleteRecords on a raft cluster through
// a leader kill. kadm DeleteRecords moves partition 0's log start to 50; a consumer
// asking for offset 10 is answered OFFSET_OUT_OF_RANGE and resets to 50. The
// partition's leader is SIGKILLed; a DeleteRecords at -1 (the high watermark),
// retried until the new leader takes it, moves the log start to 100, and
// ListOffsets earliest says so. Once the killed node is back, every node names the
// same log start, appends continue at 100, and a consumer from the start reads them.
func TestRaftKafkaDeleteRecordsLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	topic := topicName("raft-trim")
	s, leader := startRaftStack(t, topic, 1)
	ch := channel.KafkaPartition(topic, 0)
	adm := newAdmin(t, s.KafkaAddrs)
	pr := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := pr.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Value: []byte(fmt.Sprintf("d%d", i))}).FirstErr(); err != nil {
				t.Fatalf("produce %d: %v", i, err)
			}
		}
	}
	produce(0, 100)
	del, err := adm.DeleteRecords(ctxT(t, 20*time.Second), kadm.Offsets{topic: {0: {At: 50}}})
	if r, ok := del.Lookup(topic, 0); err != nil || !ok || r.Err != nil || r.LowWatermark != 50 {
		t.Fatalf("DeleteRecords(50): %+v %v", r, err)
	}
	// A consumer below the log start: OFFSET_OUT_OF_RANGE, reset to the start.
	c := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(10)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fs := c.PollFetches(ctxT(t, 20*time.Second))
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 50 || string(recs[0].Value) != "d50" {
		t.Fatalf("consumer from 10 after DeleteRecords(50): %d records, first %v (errors %v)", len(recs), firstRec(recs), fs.Errors())
	}

	victim := leader(ch)
	t.Logf("SIGKILL of %s, partition 0's leader", victim.Name)
	if err := s.Kill(victim.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var last string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		del, err := adm.DeleteRecords(ctxT(t, 10*time.Second), kadm.Offsets{topic: {0: {At: -1}}})
		r, ok := del.Lookup(topic, 0)
		if err == nil && ok && r.Err == nil {
			if r.LowWatermark != 100 {
				t.Fatalf("DeleteRecords(-1) on the new leader: log start %d, want 100", r.LowWatermark)
			}
			break
		}
		last = fmt.Sprintf("%+v %v", r, err)
		if time.Now().After(deadline) {
			t.Fatalf("DeleteRecords(-1) after the leader kill: %s", last)
		}
	}
	starts, err := adm.ListStartOffsets(ctxT(t, 10*time.Second), topic)
	if o, ok := starts.Lookup(topic, 0); err != nil || !ok || o.Err != nil || o.Offset != 100 {
		t.Fatalf("ListOffsets earliest after DeleteRecords(-1): %+v %v", o, err)
	}
	if err := s.Restart(ctxT(t, 60*time.Second), victim.Name); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var bad error
		for _, a := range strings.Split(s.StorageAddr, ",") {
			cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			r, err := storagev1.NewStorageServiceClient(cc).GetChannel(ctxT(t, 5*time.Second), &storagev1.GetChannelRequest{Name: ch})
			_ = cc.Close()
			if got := r.GetChannel().GetLogStartSequence(); err != nil || got != 101 {
				bad = fmt.Errorf("node %s log start sequence %d (%v), want 101 (offset 100)", a, got, err)
			}
		}
		if bad == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(bad)
		}
	}
	produce(100, 110)
	c2 := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	fs = c2.PollFetches(ctxT(t, 20*time.Second))
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 100 || string(recs[0].Value) != "d100" {
		t.Fatalf("consumer from the start after the kill: %d records, first %v (errors %v)", len(recs), firstRec(recs), fs.Errors())
	}
	// The replicas are byte-identical from the log start every node moved to.
	if r := checkStackReplicas(t, s, map[string]int64{ch: 110})[ch]; r[0] != 100 {
		t.Fatalf("check-replicas compared %s over %v, want from offset 100", ch, r)
	}
}

func firstRec(recs []*kgo.Record) any {
	if len(recs) == 0 {
		return nil
	}
	return fmt.Sprintf("%d:%s", recs[0].Offset, recs[0].Value)
}
