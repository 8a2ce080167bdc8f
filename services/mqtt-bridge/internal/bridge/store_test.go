package bridge

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// countingStorage is a storage client whose Append blocks until release is closed
// (channels in stuck always fail UNAVAILABLE, an answer in doubt, at once) and
// which records the most Appends it saw in flight at once and the most records one
// Append carried.
type countingStorage struct {
	storagev1.StorageServiceClient
	release chan struct{}
	stuck   map[string]bool

	mu               sync.Mutex
	inFlight, most   int
	mostRecords      int
	stuckAttempts    map[string]int
	storedByChannel  map[string]int
	enteredByChannel chan string
}

func (c *countingStorage) Append(ctx context.Context, req *storagev1.AppendRequest, _ ...grpc.CallOption) (*storagev1.AppendResponse, error) {
	ch := req.GetChannel()
	if c.stuck[ch] {
		c.mu.Lock()
		c.stuckAttempts[ch]++
		c.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "storage-core unreachable")
	}
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.mostRecords = max(c.mostRecords, len(req.GetRecords()))
	c.mu.Unlock()
	c.enteredByChannel <- ch
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.storedByChannel[ch] += len(req.GetRecords())
		c.mu.Unlock()
	}()
	select {
	case <-c.release:
		return &storagev1.AppendResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type fixedProducers struct {
	coordinatorv1.CoordinatorServiceClient
}

// GetTopics answers every topic with one partition; topic "small" sets
// max.message.bytes to 450000 (two records of 200 KiB fit in a batch, three do not).
func (fixedProducers) GetTopics(_ context.Context, req *coordinatorv1.GetTopicsRequest, _ ...grpc.CallOption) (*coordinatorv1.GetTopicsResponse, error) {
	var out []*coordinatorv1.Topic
	for _, n := range req.GetNames() {
		t := &coordinatorv1.Topic{Name: n, Partitions: 1}
		if n == "small" {
			t.Configs = map[string]string{"max.message.bytes": "450000"}
		}
		out = append(out, t)
	}
	return &coordinatorv1.GetTopicsResponse{Topics: out}, nil
}

func (fixedProducers) InitProducerId(context.Context, *coordinatorv1.InitProducerIdRequest, ...grpc.CallOption) (*coordinatorv1.InitProducerIdResponse, error) {
	return &coordinatorv1.InitProducerIdResponse{ProducerId: 7}, nil
}

func newCountingStore(t *testing.T, stuck ...string) (*store, *countingStorage) {
	t.Helper()
	c := &countingStorage{release: make(chan struct{}), stuck: map[string]bool{}, stuckAttempts: map[string]int{},
		storedByChannel: map[string]int{}, enteredByChannel: make(chan string, 100)}
	for _, ch := range stuck {
		c.stuck[ch] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := newStore(ctx, c, fixedProducers{}, 5*time.Second, zap.NewNop())
	t.Cleanup(func() { cancel(); s.wait() })
	deadline := time.Now().Add(5 * time.Second)
	for s.producers.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("producer ids never loaded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return s, c
}

func oneRecord() []*storagev1.AppendRecord {
	return []*storagev1.AppendRecord{{Value: []byte("v")}}
}

// Appends to six channels at once: at most maxAppends are in flight, the rest wait
// and go out once those are answered, and every record is stored.
func TestStoreBoundsAppendsInFlight(t *testing.T) {
	s, c := newCountingStore(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for p := range int32(6) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.append(context.Background(), "t", p, oneRecord(), nil)
		}()
	}
	for range maxAppends {
		<-c.enteredByChannel
	}
	select {
	case ch := <-c.enteredByChannel:
		t.Fatalf("Append to %s sent while %d were in flight", ch, maxAppends)
	case <-time.After(200 * time.Millisecond):
	}
	close(c.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.most != maxAppends {
		t.Fatalf("most Appends in flight = %d, want %d", c.most, maxAppends)
	}
	for p := range int32(6) {
		if n := c.storedByChannel[channel.KafkaPartition("t", p)]; n != 1 {
			t.Fatalf("partition %d: %d records stored, want 1 (%v)", p, n, c.storedByChannel)
		}
	}
}

// Appends left in doubt on maxAppends channels are sent again and again; they do not
// hold the bridge's Appends in flight, so another channel's records are still stored.
func TestStoreInDoubtRetriesDoNotHoldAppends(t *testing.T) {
	stuck := make([]string, 0, maxAppends)
	for p := 1; p <= maxAppends; p++ {
		stuck = append(stuck, channel.KafkaPartition("t", int32(p)))
	}
	s, c := newCountingStore(t, stuck...)
	close(c.release)
	for p := 1; p <= maxAppends; p++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		go func() { defer cancel(); _ = s.append(ctx, "t", int32(p), oneRecord(), nil) }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		retrying := 0
		for _, ch := range stuck {
			if c.stuckAttempts[ch] >= 2 {
				retrying++
			}
		}
		c.mu.Unlock()
		if retrying == len(stuck) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stuck channels' Appends were not sent again")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.append(ctx, "t", 0, oneRecord(), nil); err != nil {
		t.Fatalf("append to a healthy channel while %d others retry: %v", maxAppends, err)
	}
}

// Requests queued on one channel while its Append is in flight are coalesced only up
// to the topic's max.message.bytes (storage-core refuses a whole Append over it):
// records of 200 KiB go at most five to an Append under the default (1048588), at most
// two where the topic sets 450000, and every one is stored.
func TestStoreBoundsBatchBytes(t *testing.T) {
	for _, tc := range []struct {
		topic string
		most  int
	}{{"t", 5}, {"small", 2}} {
		t.Run(tc.topic, func(t *testing.T) {
			s, c := newCountingStore(t)
			if _, err := s.partitions(context.Background(), tc.topic, 1); err != nil {
				t.Fatal(err)
			}
			big := func() []*storagev1.AppendRecord {
				return []*storagev1.AppendRecord{{Key: []byte("k"), Value: make([]byte, 200<<10)}}
			}
			const queued = 20
			errs := make(chan error, queued+1)
			go func() { errs <- s.append(context.Background(), tc.topic, 0, big(), nil) }()
			<-c.enteredByChannel
			for range queued {
				go func() { errs <- s.append(context.Background(), tc.topic, 0, big(), nil) }()
			}
			w, _ := s.writer(tc.topic, 0)
			deadline := time.Now().Add(5 * time.Second)
			for len(w) < queued {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d appends queued", len(w), queued)
				}
				time.Sleep(5 * time.Millisecond)
			}
			close(c.release)
			for range queued + 1 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.mostRecords > tc.most {
				t.Fatalf("an Append carried %d records of 200 KiB, want at most %d", c.mostRecords, tc.most)
			}
			if n := c.storedByChannel[channel.KafkaPartition(tc.topic, 0)]; n != queued+1 {
				t.Fatalf("%d records stored, want %d", n, queued+1)
			}
		})
	}
}

// A partition's share over its topic's limit is cut into parts that each fit, in order,
// one part per round; a record larger on its own is a part alone; a small group is
// one part.
func TestAppendRounds(t *testing.T) {
	big := func(n, size int) *target {
		g := &target{topic: "t"}
		for i := range n {
			g.recs = append(g.recs, &storagev1.AppendRecord{Key: []byte{byte(i)}, Value: make([]byte, size)})
			g.received = append(g.received, time.UnixMilli(int64(i)))
		}
		return g
	}
	large, small, huge := big(20, 200<<10), big(3, 10), big(2, 2<<20)
	rounds := appendRounds([]*target{large, small, huge}, func(string) int { return defaultMaxMessageBytes })
	for k, round := range rounds {
		for _, part := range round {
			if n := batchOverhead + recordsBytes(part.recs); n > defaultMaxMessageBytes && len(part.recs) > 1 {
				t.Fatalf("round %d: a part of %d records estimates %d bytes > %d", k, len(part.recs), n, defaultMaxMessageBytes)
			}
			if len(part.received) != len(part.recs) {
				t.Fatalf("round %d: %d receive times for %d records", k, len(part.received), len(part.recs))
			}
		}
	}
	var keys [3][]byte // per group (told apart by value size), the keys in round order
	for _, round := range rounds {
		for _, part := range round {
			i := map[int]int{200 << 10: 0, 10: 1, 2 << 20: 2}[len(part.recs[0].GetValue())]
			for _, r := range part.recs {
				keys[i] = append(keys[i], r.GetKey()[0])
			}
		}
	}
	for i, want := range []int{20, 3, 2} {
		if len(keys[i]) != want {
			t.Fatalf("group %d: %d records over the rounds, want %d", i, len(keys[i]), want)
		}
		for j, k := range keys[i] {
			if int(k) != j {
				t.Fatalf("group %d: records out of order: %v", i, keys[i])
			}
		}
	}
	if len(rounds) < 4 {
		t.Fatalf("%d rounds for 20 records of 200 KiB, want at least 4", len(rounds))
	}
	if n := len(appendRounds([]*target{small}, func(string) int { return defaultMaxMessageBytes })); n != 1 {
		t.Fatalf("a small group took %d rounds, want 1", n)
	}
}

// slowTopics answers GetTopics with three partitions once release is closed, counting
// the calls.
type slowTopics struct {
	fixedProducers
	calls   atomic.Int32
	release chan struct{}
}

func (c *slowTopics) GetTopics(ctx context.Context, req *coordinatorv1.GetTopicsRequest, _ ...grpc.CallOption) (*coordinatorv1.GetTopicsResponse, error) {
	c.calls.Add(1)
	select {
	case <-c.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &coordinatorv1.GetTopicsResponse{Topics: []*coordinatorv1.Topic{{Name: req.GetNames()[0], Partitions: 3}}}, nil
}

// A partition count past topicRefresh is asked for again by one caller only: the
// publishes arriving meanwhile use the count known, without waiting for the
// coordinator, and the next ones get the new count.
func TestStalePartitionCountRefreshedOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	coord := &slowTopics{release: make(chan struct{})}
	s := newStore(ctx, &countingStorage{}, coord, 5*time.Second, zap.NewNop())
	t.Cleanup(func() { cancel(); s.wait() })
	s.mu.Lock()
	s.topics["t"] = topicInfo{partitions: 1, maxMessageBytes: defaultMaxMessageBytes, at: time.Now().Add(-2 * topicRefresh)}
	s.mu.Unlock()

	refreshed := make(chan int32)
	go func() {
		n, _ := s.partitions(ctx, "t", 1)
		refreshed <- n
	}()
	for coord.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	during := make(chan error, 50)
	for range 50 {
		go func() {
			n, err := s.partitions(ctx, "t", 1)
			if err == nil && n != 1 {
				err = fmt.Errorf("%d partitions, want the known 1", n)
			}
			during <- err
		}()
	}
	for range 50 {
		select {
		case err := <-during:
			if err != nil {
				t.Fatalf("during the refresh: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a publish during the refresh waited for the coordinator")
		}
	}
	if n := coord.calls.Load(); n != 1 {
		t.Fatalf("GetTopics called %d times during one refresh, want 1", n)
	}
	close(coord.release)
	if n := <-refreshed; n != 3 {
		t.Fatalf("refreshing caller got %d partitions, want 3", n)
	}
	if n, err := s.partitions(ctx, "t", 1); err != nil || n != 3 {
		t.Fatalf("after the refresh: partitions = %d, %v; want 3", n, err)
	}
}
