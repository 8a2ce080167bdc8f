package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestRaftKafkaLeaderKill: three storage-core processes in raft mode, a coordinator
// and a kafka-gateway given all three addresses (--storage-addr a,b,c). The topic is
// created through the coordinator (CreateChannel goes to the metadata group's leader).
// A kgo idempotent producer (acks=all) writes N unique values while the partition's
// leader storage-core node is SIGKILLed and later restarted; the gateway re-routes to
// the new leader (NOT_LEADER_OR_FOLLOWER to the client meanwhile). Verdict: every
// produce is acknowledged, and a kgo consumer reads every acknowledged value exactly
// once, in produce order, at the offset it was acknowledged with.
func TestRaftKafkaLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three storage-core processes")
	}
	ctx := context.Background()
	s, err := stack.Start(ctx, stack.Options{StorageNodes: 3, LogLevel: "warn"})
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
	topic := topicName("raft-route")
	// Before the first election the metadata group has no leader: the create fails and
	// is retried, as a client would.
	adm := newAdmin(t, s.KafkaAddrs)
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := adm.CreateTopic(ctxT(t, 10*time.Second), 1, -1, nil, topic)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CreateTopics %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitTopic(t, adm, topic, 1)

	// leader asks the running nodes which node leads the partition's group.
	leader := func() *stack.Proc {
		for {
			for _, p := range s.Storages {
				if !p.Running() {
					continue
				}
				for addr, c := range clients {
					if storages[addr] != p {
						continue
					}
					r, err := c.GetChannel(ctxT(t, 2*time.Second), &storagev1.GetChannelRequest{Name: "kafka." + topic})
					if l := r.GetChannel().GetLeaderAddress(); err == nil && l != "" && storages[l].Running() {
						return storages[l]
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

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
	for i := 0; i < n; i++ {
		if i == killAt {
			// Records are in flight (buffered up to 100): kill the leader under them.
			killOnce.Do(func() {
				p := leader()
				t.Logf("after %d produced: SIGKILL of the leader %s", i, p.Name)
				if err := s.Kill(p.Name, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed <- p
			})
		}
		v := fmt.Sprintf("v-%05d", i)
		producer.Produce(pctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
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
	got := 0
	for got < n {
		fs := consumer.PollFetches(cctx)
		if err := cctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", got, n, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch error (retried): %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			want := fmt.Sprintf("v-%05d", got)
			if string(r.Value) != want || r.Offset != acked[want] {
				t.Fatalf("record %d: %q at offset %d, want %q at its acknowledged offset %d", got, r.Value, r.Offset, want, acked[want])
			}
			got++
		})
	}
	// Nothing after the last value: the end offset is the last acknowledged one + 1.
	ends, err := newAdmin(t, s.KafkaAddrs).ListEndOffsets(ctxT(t, 10*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := ends.Lookup(topic, 0); !ok || o.Err != nil || o.Offset != int64(n) {
		t.Fatalf("end offset %+v, want %d", o, n)
	}
}
