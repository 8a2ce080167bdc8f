package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRaftKafkaLeaderKill: three storage-core processes in raft mode, a coordinator
// and a kafka-gateway given all three addresses (--storage-addr a,b,c). The topic is
// created through the coordinator (CreateChannel goes to the metadata group's leader).
// A kgo idempotent producer (acks=all) writes N unique values over 3 partitions (whose
// leaders are usually on different nodes, so Produce requests are split by the Router)
// while partition 0's leader storage-core node is SIGKILLed and later restarted; the
// gateway re-routes to the new leaders (NOT_LEADER_OR_FOLLOWER to the client
// meanwhile). Verdict: every produce is acknowledged, and a kgo consumer reads every
// acknowledged value exactly once, in produce order per partition, at the offset it
// was acknowledged with; each partition's end offset is its count; partition 0's
// leader epoch (Metadata: the Raft term) is larger after the kill than before.
func TestRaftKafkaLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	ctx := context.Background()
	topic := topicName("raft-route")
	// Three partitions: their groups elect leaders independently, so one Produce
	// request usually spans several storage nodes (the Router splits it).
	const partitions = 3
	s, leader := startRaftStack(t, topic, partitions)

	const n = 3000
	producer := newClient(t, s.KafkaAddrs, kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.MaxBufferedRecords(100), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var mu sync.Mutex
	acked := map[string]int64{}
	var failed []error
	killAt, restartAt := n/3, 2*n/3
	killed := make(chan *stack.Proc, 1)
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		victim := <-killed
		if victim == nil {
			return
		}
		for {
			mu.Lock()
			k := len(acked) + len(failed)
			mu.Unlock()
			if k >= restartAt {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("restarting %s", victim.Name)
		if err := s.Restart(ctx, victim.Name); err != nil {
			t.Errorf("restart %s: %v", victim.Name, err)
		}
	}()
	pctx := ctxT(t, 60*time.Second)
	var killOnce sync.Once
	var epochBefore int32
	for i := 0; i < n; i++ {
		if i == killAt {
			// Records are in flight (buffered up to 100): kill the leader under them.
			killOnce.Do(func() {
				p := leader("kafka." + topic)
				names := []string{p.Name}
				for q := 1; q < partitions; q++ {
					names = append(names, leader(fmt.Sprintf("kafka.%s~%d", topic, q)).Name)
				}
				epochBefore = partitionEpoch(t, s.KafkaAddrs, topic, 0)
				t.Logf("after %d produced: partition leaders %v (partition 0 leader epoch %d); SIGKILL of partition 0's leader %s", i, names, epochBefore, p.Name)
				if err := s.Kill(p.Name, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed <- p
			})
		}
		v := fmt.Sprintf("v-%05d", i)
		producer.Produce(pctx, &kgo.Record{Value: []byte(v), Partition: int32(i % partitions)}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", v, err))
				return
			}
			if _, dup := acked[v]; dup {
				failed = append(failed, fmt.Errorf("%s acknowledged twice", v))
			}
			acked[v] = r.Offset
		})
	}
	if err := producer.Flush(pctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	<-restarted
	mu.Lock()
	if len(failed) > 0 || len(acked) != n {
		t.Fatalf("%d acknowledged of %d; failures: %v", len(acked), n, failed)
	}
	mu.Unlock()

	consumer := newClient(t, s.KafkaAddrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cctx := ctxT(t, 30*time.Second)
	// Per partition, values in produce order (i, i+3, ...), each at its acknowledged
	// offset, each once.
	next := make([]int, partitions)
	for p := range next {
		next[p] = p
	}
	got := 0
	// Partition 0's epochs in offset order, each with its first offset (the batches'
	// partitionLeaderEpoch: the Raft term each was committed in).
	type epochStart struct {
		epoch  int32
		offset int64
	}
	var p0 []epochStart
	for got < n {
		fs := consumer.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", got, n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error (retried): %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			p := r.Partition
			want := fmt.Sprintf("v-%05d", next[p])
			if string(r.Value) != want || r.Offset != acked[want] {
				t.Fatalf("partition %d record %d: %q at offset %d, want %q at its acknowledged offset %d", p, got, r.Value, r.Offset, want, acked[want])
			}
			next[p] += partitions
			got++
			if p == 0 && (len(p0) == 0 || r.LeaderEpoch > p0[len(p0)-1].epoch) {
				p0 = append(p0, epochStart{r.LeaderEpoch, r.Offset})
			}
		})
	}
	// Partition 0 has a new leader, elected in a later Raft term: its leader epoch grew.
	if after := partitionEpoch(t, s.KafkaAddrs, topic, 0); epochBefore <= 0 || after <= epochBefore {
		t.Fatalf("partition 0 leader epoch %d before its leader was killed, %d after; want a positive one that grew", epochBefore, after)
	}
	// OffsetForLeaderEpoch answers from the leader's epoch index: each epoch partition 0
	// was written in ends where the next one begins, the last at the end of the log.
	if len(p0) < 2 {
		t.Fatalf("partition 0's records carry the epochs %v, want at least two (the leader was killed)", p0)
	}
	var req kadm.OffsetForLeaderEpochRequest
	for i, e := range p0 {
		req.Add(topic, 0, e.epoch)
		oe, err := newAdmin(t, s.KafkaAddrs).OffsetForLeaderEpoch(ctxT(t, 10*time.Second), req)
		if err != nil {
			t.Fatal(err)
		}
		end := int64(n / partitions)
		if i+1 < len(p0) {
			end = p0[i+1].offset
		}
		if r := oe[topic][0]; r.Err != nil || r.LeaderEpoch != e.epoch || r.EndOffset != end {
			t.Fatalf("OffsetForLeaderEpoch of partition 0 epoch %d (epochs %v): %+v, want epoch %d end offset %d", e.epoch, p0, r, e.epoch, end)
		}
	}
	t.Logf("partition 0 epochs (epoch, first offset): %v", p0)
	// librdkafka (kcat) reads every record too, each at its acknowledged offset: it
	// follows the brokers and leaders Metadata names, which kgo copes with more freely.
	kcat := testenv.RequireBinary(t, "kcat")
	lines := kcatConsume(t, kcat, s.KafkaAddrs[0], topic, n)
	if len(lines) != n {
		t.Fatalf("kcat read %d records of %d", len(lines), n)
	}
	for _, l := range lines {
		if _, v, _ := strings.Cut(l.line, ":"); l.offset != acked[v] {
			t.Fatalf("kcat: partition %d offset %d holds %q, acknowledged at offset %d", l.partition, l.offset, v, acked[v])
		}
	}
	// Nothing after the last value: each end offset is its count of values.
	ends, err := newAdmin(t, s.KafkaAddrs).ListEndOffsets(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < partitions; p++ {
		if o, ok := ends.Lookup(topic, p); !ok || o.Err != nil || o.Offset != int64(n/partitions) {
			t.Fatalf("partition %d end offset %+v, want %d", p, o, n/partitions)
		}
	}
	// The three replicas of each partition are byte-identical over all its records.
	wantEnds := map[string]int64{}
	for p := int32(0); p < partitions; p++ {
		wantEnds[channel.KafkaPartition(topic, p)] = n / partitions
	}
	for ch, r := range checkStackReplicas(t, s, wantEnds) {
		if _, ok := wantEnds[ch]; ok && r[0] != 0 {
			t.Fatalf("check-replicas compared %s from offset %d, want 0", ch, r[0])
		}
	}
}

// partitionEpoch is the leader epoch Metadata reports for partition p of topic.
func partitionEpoch(t *testing.T, addrs []string, topic string, p int32) int32 {
	t.Helper()
	md, err := newAdmin(t, addrs).Metadata(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	pd, ok := md.Topics[topic].Partitions[p]
	if !ok {
		t.Fatalf("metadata of %s has no partition %d", topic, p)
	}
	return pd.LeaderEpoch
}

// startRaftStack starts three storage-core processes in raft mode, a coordinator and
// a kafka-gateway given all three addresses, and creates topic with partitions
// through kadm (retried until the metadata group has a leader). leader asks the
// running nodes which node leads a channel's group.
func startRaftStack(t *testing.T, topic string, partitions int32) (s *stack.Stack, leader func(ch string) *stack.Proc) {
	t.Helper()
	return startRaftStackWith(t, stack.Options{StorageNodes: 3, LogLevel: "warn"}, topic, partitions)
}

// startRaftStackWith is startRaftStack with opts (StorageNodes set by the caller).
func startRaftStackWith(t *testing.T, opts stack.Options, topic string, partitions int32) (s *stack.Stack, leader func(ch string) *stack.Proc) {
	t.Helper()
	s, err := stack.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.LogTails(40))
		}
		_ = s.Close()
	})
	storages := map[string]*stack.Proc{}
	clients := map[string]storagev1.StorageServiceClient{}
	for i, addr := range strings.Split(s.StorageAddr, ",") {
		storages[addr] = s.Storages[i]
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		clients[addr] = storagev1.NewStorageServiceClient(cc)
	}
	// Before the first election the metadata group has no leader: the create fails and
	// is retried, as a client would.
	adm := newAdmin(t, s.KafkaAddrs)
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := adm.CreateTopic(ctxT(t, 10*time.Second), partitions, -1, nil, topic)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CreateTopics %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitTopic(t, adm, topic, partitions)
	leader = func(ch string) *stack.Proc {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			for _, p := range s.Storages {
				if !p.Running() {
					continue
				}
				for addr, c := range clients {
					if storages[addr] != p {
						continue
					}
					r, err := c.GetChannel(ctxT(t, 2*time.Second), &storagev1.GetChannelRequest{Name: ch})
					if l := r.GetChannel().GetLeaderAddress(); err == nil && l != "" && storages[l].Running() {
						return storages[l]
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no running node names a leader of %s", ch)
		return nil
	}
	return s, leader
}

// TestRaftKafkaTransactions: transactions on a raft-mode storage cluster. A kgo
// transactional producer writes three transactions over 3 partitions (whose groups
// are led by different nodes, so markers go to several leaders): commit, abort, and
// — after partition 0's leader is SIGKILLed — commit again. A read_committed consumer
// sees exactly the committed values, a read_uncommitted one all of them, neither a
// control record, and each partition's last stable offset reaches its high watermark
// (the markers were written on the new leaders too). The gateway leaves share groups
// out of ApiVersions: their queues are not replicated in raft mode.
func TestRaftKafkaTransactions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	topic := topicName("raft-txn")
	const partitions, perTxn = 3, 30
	s, leader := startRaftStack(t, topic, partitions)
	tx := newClient(t, s.KafkaAddrs, kgo.TransactionalID(topicName("raft-txn-id")), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(60*time.Second))
	var committed, all []string
	run := func(n int, commit bool) {
		t.Helper()
		ctx := ctxT(t, 60*time.Second)
		if err := tx.BeginTransaction(); err != nil {
			t.Fatalf("BeginTransaction %d: %v", n, err)
		}
		var vals []string
		for i := 0; i < perTxn; i++ {
			v := fmt.Sprintf("t%d-%02d", n, i)
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: int32(i % partitions)}).FirstErr(); err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
			vals = append(vals, v)
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("EndTransaction %d (commit %v): %v", n, commit, err)
		}
		all = append(all, vals...)
		if commit {
			committed = append(committed, vals...)
		}
	}
	run(1, true)
	run(2, false)
	victim := leader("kafka." + topic)
	t.Logf("SIGKILL of partition 0's leader %s", victim.Name)
	if err := s.Kill(victim.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	run(3, true)
	if err := s.Restart(context.Background(), victim.Name); err != nil {
		t.Fatal(err)
	}

	read := func(level kgo.IsolationLevel, want []string) {
		t.Helper()
		c := newClient(t, s.KafkaAddrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(level))
		ctx := ctxT(t, 30*time.Second)
		got := map[string]int{}
		for n := 0; n < len(want); {
			fs := c.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				t.Fatalf("read %d of %d (%v): %v", n, len(want), got, err)
			}
			fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error (retried): %v", err) })
			fs.EachRecord(func(r *kgo.Record) {
				got[string(r.Value)]++
				n++
			})
		}
		// Nothing else arrives: an aborted or control record would come after these.
		quiet, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.PollFetches(quiet).EachRecord(func(r *kgo.Record) { got[string(r.Value)]++ })
		if len(got) != len(want) {
			t.Fatalf("read %d distinct values, want %d: %v", len(got), len(want), got)
		}
		for _, v := range want {
			if got[v] != 1 {
				t.Fatalf("value %s read %d times, want once", v, got[v])
			}
		}
	}
	av, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctxT(t, 10*time.Second), tx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range av.ApiKeys {
		if k.ApiKey == int16(kmsg.ShareFetch) || k.ApiKey == int16(kmsg.ShareGroupHeartbeat) {
			t.Fatalf("ApiVersions advertises key %d in raft mode", k.ApiKey)
		}
	}
	for _, f := range av.FinalizedFeatures {
		if f.Name == "share.version" && f.MaxVersionLevel > 0 {
			t.Fatalf("share.version %d finalized in raft mode", f.MaxVersionLevel)
		}
	}

	read(kgo.ReadCommitted(), committed)
	read(kgo.ReadUncommitted(), all)

	waitStableAtEnd(t, newAdmin(t, s.KafkaAddrs), topic, partitions, 30*time.Second)
}

// waitStableAtEnd waits up to d for every partition's last stable offset to reach its
// high watermark (every transaction's markers written), failing the test otherwise.
func waitStableAtEnd(t *testing.T, adm *kadm.Client, topic string, partitions int32, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; {
		stable, err1 := adm.ListCommittedOffsets(ctxT(t, 10*time.Second), topic)
		ends, err2 := adm.ListEndOffsets(ctxT(t, 10*time.Second), topic)
		same := err1 == nil && err2 == nil
		for p := int32(0); same && p < partitions; p++ {
			so, ok1 := stable.Lookup(topic, p)
			eo, ok2 := ends.Lookup(topic, p)
			same = ok1 && ok2 && so.Err == nil && eo.Err == nil && so.Offset == eo.Offset
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("last stable offsets %v never reached the high watermarks %v (%v %v)", stable, ends, err1, err2)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
