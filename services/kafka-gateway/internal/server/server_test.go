package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/tributary/tributary/services/kafka-gateway/internal/cluster"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type stack struct {
	srv     *Server
	storage *fake.Storage
	coord   *fake.Coordinator
	addr    string
}

// startServer runs a gateway over fakes and stops it when the test ends.
func startServer(t testing.TB, mod func(*Config)) *stack {
	t.Helper()
	st := fake.NewStorage()
	co := fake.NewCoordinator(st)
	cfg := Config{
		Listen:            "127.0.0.1:0",
		HTTPAddr:          "127.0.0.1:0",
		ClusterID:         "test",
		AutoCreateTopics:  true,
		DefaultPartitions: 1,
		Storage:           st,
		Coordinator:       co,
	}
	if mod != nil {
		mod(&cfg)
	}
	log := zap.NewNop()
	if _, fuzz := t.(*testing.F); !fuzz {
		// A fuzz target may not log through its *testing.F.
		log = zaptest.NewLogger(t)
	}
	srv, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &stack{srv: srv, storage: st, coord: co, addr: srv.KafkaAddr()}
}

func TestKgoProduceConsume(t *testing.T) {
	s := startServer(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	adm, err := kgo.NewClient(kgo.SeedBrokers(s.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	admin := kadm.NewClient(adm)
	if _, err := admin.CreateTopic(ctx, 3, 1, nil, "orders"); err != nil {
		t.Fatalf("create topic: %v", err)
	}

	prod, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	const n = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	var perr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%17)), Value: []byte(fmt.Sprintf("v%d", i))}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				perr = errors.Join(perr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if perr != nil {
		t.Fatalf("produce: %v", perr)
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(s.addr), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	next := map[int32]int64{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(seen), n, err)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			seen[string(r.Value)] = true
		})
	}
	offs, err := admin.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	offs.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Fatalf("end offsets sum %d, want %d", total, n)
	}
}

func TestDerivedNodeIDIsStableAndNonNegative(t *testing.T) {
	a := derivedNodeID(cluster.Member{Host: "10.0.0.7", Port: 9092})
	b := derivedNodeID(cluster.Member{Host: "10.0.0.7", Port: 9092})
	c := derivedNodeID(cluster.Member{Host: "10.0.0.8", Port: 9092})
	if a != b || a < 0 || c < 0 || a == c {
		t.Fatalf("derived ids: %d %d %d", a, b, c)
	}
}
