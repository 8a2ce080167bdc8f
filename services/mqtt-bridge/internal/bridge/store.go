package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Kafka error codes the coordinator answers with.
const (
	kafkaUnknownTopic       = 3
	kafkaTopicAlreadyExists = 36
)

// topicRefresh is how long a partition count is trusted before it is asked again.
const topicRefresh = 30 * time.Second

// maxBatchRecords bounds one Append of coalesced requests.
const maxBatchRecords = 2000

// appendsInFlight is how many Appends one channel may have in flight at once. Requests
// that must keep their order relative to each other are never in flight together: a
// listener client has one publish in flight, and upstream batches wait for the one
// before them.
const appendsInFlight = 4

// store appends records to storage-core, coalescing concurrent appends to one channel
// into one Append (one fsync), and knows each Kafka topic's partition count.
type store struct {
	storage storagev1.StorageServiceClient
	coord   coordinatorv1.CoordinatorServiceClient
	timeout time.Duration

	mu      sync.Mutex
	topics  map[string]topicInfo
	writers map[string]chan *appendReq
	ctx     context.Context
	wg      sync.WaitGroup
}

type topicInfo struct {
	partitions int32
	at         time.Time
}

type appendReq struct {
	ctx  context.Context // the caller's: a request it gave up on is not sent
	recs []*storagev1.AppendRecord
	done chan error
}

func newStore(ctx context.Context, s storagev1.StorageServiceClient, c coordinatorv1.CoordinatorServiceClient, timeout time.Duration) *store {
	return &store{storage: s, coord: c, timeout: timeout, topics: map[string]topicInfo{}, writers: map[string]chan *appendReq{}, ctx: ctx}
}

// partitions returns the partition count of topic, creating the topic with create
// partitions when it does not exist.
func (s *store) partitions(ctx context.Context, topic string, create int32) (int32, error) {
	s.mu.Lock()
	ti, ok := s.topics[topic]
	s.mu.Unlock()
	if ok && time.Since(ti.at) < topicRefresh {
		return ti.partitions, nil
	}
	n, err := s.fetchPartitions(ctx, topic, create)
	if err != nil {
		if ok {
			return ti.partitions, nil // keep using the last known count
		}
		return 0, err
	}
	s.mu.Lock()
	s.topics[topic] = topicInfo{partitions: n, at: time.Now()}
	s.mu.Unlock()
	return n, nil
}

func (s *store) fetchPartitions(ctx context.Context, topic string, create int32) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := s.coord.GetTopics(ctx, &coordinatorv1.GetTopicsRequest{Names: []string{topic}})
		if err != nil {
			return 0, fmt.Errorf("coordinator GetTopics %s: %w", topic, err)
		}
		for _, t := range resp.GetTopics() {
			if t.GetName() == topic && t.GetErrorCode() == 0 && t.GetPartitions() > 0 {
				return t.GetPartitions(), nil
			}
		}
		cr, err := s.coord.CreateTopics(ctx, &coordinatorv1.CreateTopicsRequest{
			Topics: []*coordinatorv1.CreatableTopic{{Name: topic, Partitions: create}},
		})
		if err != nil {
			return 0, fmt.Errorf("coordinator CreateTopics %s: %w", topic, err)
		}
		for _, r := range cr.GetResults() {
			switch r.GetErrorCode() {
			case 0:
				return r.GetTopic().GetPartitions(), nil
			case kafkaTopicAlreadyExists:
				// created meanwhile: ask again
			default:
				return 0, fmt.Errorf("create topic %s: kafka error %d: %s", topic, r.GetErrorCode(), r.GetErrorMessage())
			}
		}
	}
	return 0, fmt.Errorf("topic %s: no partition count", topic)
}

// append stores recs on the channel of topic partition p and returns once they are
// durable, or with the error. Concurrent appends to one channel share one Append.
func (s *store) append(ctx context.Context, topic string, p int32, recs []*storagev1.AppendRecord) error {
	name := channel.KafkaPartition(topic, p)
	req := &appendReq{ctx: ctx, recs: recs, done: make(chan error, 1)}
	w := s.writer(name)
	select {
	case w <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *store) writer(name string) chan *appendReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.writers[name]
	if !ok {
		w = make(chan *appendReq, 256)
		s.writers[name] = w
		s.wg.Add(1)
		go s.write(name, w)
	}
	return w
}

func (s *store) write(name string, w chan *appendReq) {
	defer s.wg.Done()
	slots := make(chan struct{}, appendsInFlight)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for {
		var first *appendReq
		select {
		case first = <-w:
		case <-s.ctx.Done():
			return
		}
		batch := []*appendReq{first}
		n := len(first.recs)
	drain:
		for n < maxBatchRecords {
			select {
			case r := <-w:
				batch = append(batch, r)
				n += len(r.recs)
			default:
				break drain
			}
		}
		select {
		case slots <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		// Requests whose callers gave up meanwhile (a listener publish already answered
		// 0x97) are not stored; the Append lasts until the latest caller deadline.
		live := batch[:0]
		deadline := time.Now().Add(s.timeout)
		latest := time.Time{}
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil {
				r.done <- err
				continue
			}
			live = append(live, r)
			d, ok := r.ctx.Deadline()
			if !ok || d.After(deadline) {
				d = deadline
			}
			if d.After(latest) {
				latest = d
			}
		}
		if len(live) == 0 {
			<-slots
			continue
		}
		batch = live
		recs := make([]*storagev1.AppendRecord, 0, n)
		for _, r := range batch {
			recs = append(recs, r.recs...)
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { <-slots }()
			ctx, cancel := context.WithDeadline(s.ctx, latest)
			defer cancel()
			// WaitForReady: while storage-core is unreachable the append waits (the
			// acknowledgement is held) until it is back or the store timeout passes.
			_, err := s.storage.Append(ctx, &storagev1.AppendRequest{Channel: name, Records: recs}, grpc.WaitForReady(true))
			if err != nil {
				err = fmt.Errorf("append %s: %w", name, err)
			}
			for _, r := range batch {
				r.done <- err
			}
		}()
	}
}

func (s *store) wait() { s.wg.Wait() }
