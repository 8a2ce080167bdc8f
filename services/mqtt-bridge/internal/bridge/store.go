package bridge

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
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

// defaultMaxMessageBytes is a topic's max.message.bytes when it sets none (Kafka's
// default, the coordinator's too), in bytes. storage-core refuses an Append whose batch
// is larger than its channel's limit (INVALID_ARGUMENT), so requests are coalesced
// while their estimated size (recordsBytes) stays within the topic's limit; a request
// larger on its own is sent alone, and the channel decides.
const defaultMaxMessageBytes = 1048588

// Upper bounds of a Kafka record batch's overhead (KIP-98 record batch v2): the batch
// header, each record's varints (length, attributes, timestamp and offset deltas, key
// and value lengths, header count) and each header's two length varints, in bytes.
const (
	batchOverhead  = 61
	recordOverhead = 5 + 1 + 10 + 5 + 5 + 5 + 5
	headerOverhead = 5 + 5
)

// recordsBytes is an upper bound of what recs add to a record batch, in bytes.
func recordsBytes(recs []*storagev1.AppendRecord) int {
	n := 0
	for _, r := range recs {
		n += recordOverhead + len(r.GetKey()) + len(r.GetValue())
		for _, h := range r.GetHeaders() {
			n += headerOverhead + len(h.GetKey()) + len(h.GetValue())
		}
	}
	return n
}

// appendsInFlight is how many Appends one channel may have in flight at once. With
// one, a channel's records are stored in the order they were queued (a listener
// client's publishes are queued in the order they came; upstream batches wait for the
// one before them). One is fastest: what arrives while an Append is in flight goes into the
// next one, and an Append costs storage-core about one fsync whatever its size, so
// more Appends in flight only split the same records into more, smaller Appends. In
// mqttbench (100 QoS 1 publishers, 6 partitions) 1 instead of 4 halved the CPU per
// message in storage-core and cut it by a third in the bridge, and doubled the rate.
const appendsInFlight = 1

// maxAppends is how many Appends the whole bridge has in flight at once, over all
// channels, for their first attempt (a retry of an Append left in doubt does not count,
// so one channel's outage does not hold up the others). Under load, what arrives while
// the Appends are out waits and joins the next batch, so fewer and larger Appends
// carry the same records: storage-core pays about one fsync and one call per Append
// whatever its size. In mqttbench (100 QoS 1 publishers, 6 partitions) 2 lowered
// storage-core's CPU per message from about 48 to 31 µs and raised the rate by about a
// sixth against no limit, in alternating runs; 1 and 3 did less well. Without load an
// Append is sent at once.
const maxAppends = 2

// store appends records to storage-core, coalescing concurrent appends to one channel
// into one Append (one fsync), and knows each Kafka topic's partition count.
//
// Appends are idempotent (storage.proto AppendProducer, Kafka's idempotent producer):
// each of a channel's appendsInFlight slots appends as its own producer (an id from the
// coordinator's InitProducerId, shared by that slot of every channel; storage-core keeps
// producer state per channel), with at most one Append in flight, so a slot's batches
// reach a channel in sequence order. An Append that was sent but not answered
// (storage-core stopped or stalled, the connection lost, the deadline passed) is in
// doubt: it may be stored, now or later. The slot sends the very same batch again (same
// producer, epoch and sequence) until storage-core answers, before it sends anything
// else to that channel: the answer is then definite (stored exactly once, the original
// or the retry, whichever lands first, the other recognised as its duplicate; or
// refused). Callers are answered with that outcome, or, if their deadline comes first,
// with an inDoubtError holding a handle on it. Until the producer ids are known
// (coordinator unreachable since start) batches are sent without an identity, and an
// unanswered one stays unknown.
//
// A batch holding records of listener messages (requests with an origin) is shown to
// sessions before it is sent: the listener's session store journals it with its
// producer identity, so that a restarted bridge can send it again unchanged (resend)
// and storage-core's idempotence tells whether it landed (see internal/sessions).
type store struct {
	storage storagev1.StorageServiceClient
	coord   coordinatorv1.CoordinatorServiceClient
	timeout time.Duration
	log     *zap.Logger
	// sessions, when set (before the first append), learns each batch with origins
	// before it is sent, and its outcome.
	sessions batchJournal

	mu     sync.Mutex
	topics map[string]topicInfo
	// writers holds each topic partition's queue of appends, served by its own
	// goroutine (write).
	writers map[partitionKey]chan *appendReq
	ctx     context.Context
	wg      sync.WaitGroup
	// producers holds the slots' producer ids once InitProducerId answered.
	producers atomic.Pointer[[appendsInFlight]int64]
	// appending holds a token per Append on its first attempt (maxAppends).
	appending chan struct{}
}

type topicInfo struct {
	partitions int32
	// maxMessageBytes is the topic's max.message.bytes (defaultMaxMessageBytes unless set).
	maxMessageBytes int
	at              time.Time
	// refreshing is set while one caller asks the coordinator again for a count past
	// topicRefresh; the others keep using this one meanwhile.
	refreshing bool
}

// States of an appendReq: queued until the writer sends it or its caller gives up.
const (
	reqQueued int32 = iota
	reqSent
	reqAbandoned
)

// batchJournal is told about batches that hold listener messages (see store); the
// listener's *sessions.Store is one.
type batchJournal interface {
	// Sending is called before the first Append of a batch whose requests have
	// origins, with the request as it will be sent (producer identity included) and
	// the outcome it will get. It returns an id for Answered (0: nothing to tell); an
	// error keeps the batch from being sent (its callers get the error).
	Sending(req *storagev1.AppendRequest, origins []*sessions.Origin, out *sessions.Outcome) (id uint64, err error)
	// Answered is called once storage-core answered (out is known), not when the
	// bridge stopped with the batch still in doubt.
	Answered(id uint64, out *sessions.Outcome)
}

type appendReq struct {
	ctx  context.Context // the caller's: a request it gave up on before it was sent is not sent
	recs []*storagev1.AppendRecord
	// limit is the channel's batch limit in bytes (its topic's max.message.bytes).
	limit int
	// origin is the listener message recs come from (nil when it is not worth
	// journaling: upstream, QoS 0, a session that ends with its connection).
	origin *sessions.Origin
	done   chan error // the definite outcome
	// wake, when set, is signalled (without blocking) once done has the outcome: the
	// listener client's flow waits on it for all of its publishes at once.
	wake chan struct{}
	// state moves from reqQueued to reqSent (by the writer) or reqAbandoned (by the
	// caller), once; out is set before reqSent.
	state atomic.Int32
	out   *sessions.Outcome
}

// answer gives r its outcome.
func (r *appendReq) answer(err error) {
	r.done <- err
	if r.wake != nil {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// inDoubtError is an append whose caller's deadline came while its batch was sent and
// not answered: it may be stored. out resolves once the batch is sent again and
// answered (see store).
type inDoubtError struct {
	out   *sessions.Outcome
	cause error
}

func (e *inDoubtError) Error() string {
	return "append sent and not answered yet (in doubt): " + e.cause.Error()
}

func (e *inDoubtError) Unwrap() error { return e.cause }

// slotState is one slot's producer state on one channel.
type slotState struct {
	epoch int16
	seq   int32 // base sequence of the slot's next batch
	// exhausted: every epoch was used; the slot appends without an identity.
	exhausted bool
}

func newStore(ctx context.Context, s storagev1.StorageServiceClient, c coordinatorv1.CoordinatorServiceClient, timeout time.Duration, log *zap.Logger) *store {
	st := &store{storage: s, coord: c, timeout: timeout, log: log, topics: map[string]topicInfo{}, writers: map[partitionKey]chan *appendReq{}, ctx: ctx, appending: make(chan struct{}, maxAppends)}
	st.wg.Add(1)
	go st.initProducers()
	return st
}

// initProducers asks the coordinator for the slots' producer ids, retrying (0.1 to 5 s
// apart) until it answers or the bridge stops.
func (s *store) initProducers() {
	defer s.wg.Done()
	var ids [appendsInFlight]int64
	backoff := 100 * time.Millisecond
	for i := 0; i < appendsInFlight; {
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		resp, err := s.coord.InitProducerId(ctx, &coordinatorv1.InitProducerIdRequest{ProducerId: -1, ProducerEpoch: -1})
		cancel()
		if err == nil && resp.GetErrorCode() != 0 {
			err = fmt.Errorf("kafka error %d", resp.GetErrorCode())
		}
		if err == nil {
			ids[i] = resp.GetProducerId()
			i++
			continue
		}
		s.log.Warn("producer id not allocated yet; appends are not idempotent until it is", zap.Error(err))
		if !retry(s.ctx, &backoff) {
			return
		}
	}
	s.producers.Store(&ids)
}

// partitions returns the partition count of topic, creating the topic with create
// partitions when it does not exist.
func (s *store) partitions(ctx context.Context, topic string, create int32) (int32, error) {
	s.mu.Lock()
	ti, ok := s.topics[topic]
	if ok && (ti.refreshing || time.Since(ti.at) < topicRefresh) {
		s.mu.Unlock()
		return ti.partitions, nil
	}
	if ok {
		// One refresh at a time: every publish arriving meanwhile would otherwise wait
		// for a GetTopics of its own.
		ti.refreshing = true
		s.topics[topic] = ti
	}
	s.mu.Unlock()
	t, err := s.fetchTopic(ctx, topic, create)
	if err != nil {
		if ok {
			s.mu.Lock()
			if cur, still := s.topics[topic]; still {
				cur.refreshing = false
				s.topics[topic] = cur
			}
			s.mu.Unlock()
			return ti.partitions, nil // keep using the last known count
		}
		return 0, err
	}
	ti = topicInfo{partitions: t.GetPartitions(), maxMessageBytes: defaultMaxMessageBytes, at: time.Now()}
	if v, err := strconv.Atoi(t.GetConfigs()["max.message.bytes"]); err == nil && v > 0 {
		ti.maxMessageBytes = v
	}
	s.mu.Lock()
	s.topics[topic] = ti
	s.mu.Unlock()
	return ti.partitions, nil
}

// batchLimit is the largest batch an Append to topic may carry, in bytes: its
// max.message.bytes as last looked up by partitions (defaultMaxMessageBytes before).
func (s *store) batchLimit(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batchLimitLocked(topic)
}

// batchLimitLocked is batchLimit, s.mu held.
func (s *store) batchLimitLocked(topic string) int {
	if ti, ok := s.topics[topic]; ok && ti.maxMessageBytes > 0 {
		return ti.maxMessageBytes
	}
	return defaultMaxMessageBytes
}

// fetchTopic returns topic as the coordinator has it (partition count, explicit
// configs), creating it with create partitions when it does not exist.
func (s *store) fetchTopic(ctx context.Context, topic string, create int32) (*coordinatorv1.Topic, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	for attempt := 0; attempt < 2; attempt++ {
		resp, err := s.coord.GetTopics(ctx, &coordinatorv1.GetTopicsRequest{Names: []string{topic}})
		if err != nil {
			return nil, fmt.Errorf("coordinator GetTopics %s: %w", topic, err)
		}
		for _, t := range resp.GetTopics() {
			if t.GetName() == topic && t.GetErrorCode() == 0 && t.GetPartitions() > 0 {
				return t, nil
			}
		}
		cr, err := s.coord.CreateTopics(ctx, &coordinatorv1.CreateTopicsRequest{
			Topics: []*coordinatorv1.CreatableTopic{{Name: topic, Partitions: create}},
		})
		if err != nil {
			return nil, fmt.Errorf("coordinator CreateTopics %s: %w", topic, err)
		}
		for _, r := range cr.GetResults() {
			switch r.GetErrorCode() {
			case 0:
				return r.GetTopic(), nil
			case kafkaTopicAlreadyExists:
				// created meanwhile: ask again
			default:
				return nil, fmt.Errorf("create topic %s: kafka error %d: %s", topic, r.GetErrorCode(), r.GetErrorMessage())
			}
		}
	}
	return nil, fmt.Errorf("topic %s: no partition count", topic)
}

// append stores recs (from the listener message o, or nil) on the channel of topic
// partition p and returns once they are durable, or with the error. Concurrent appends
// to one channel share one Append. When ctx ends first: ctx's error if the records were
// not sent (they never will be), or an *inDoubtError if they were (they may be stored;
// its outcome tells).
func (s *store) append(ctx context.Context, topic string, p int32, recs []*storagev1.AppendRecord, o *sessions.Origin) error {
	req, err := s.enqueue(ctx, topic, p, recs, o, nil)
	if err != nil {
		return err
	}
	return s.await(ctx, req)
}

// enqueue queues recs for the channel of topic partition p (behind what was queued
// for it before, so that records queued one after the other are stored in that order)
// and returns the request to await; ctx's error if it ended before there was room.
// wake, when set, is signalled once the outcome is known (appendReq.wake).
func (s *store) enqueue(ctx context.Context, topic string, p int32, recs []*storagev1.AppendRecord, o *sessions.Origin, wake chan struct{}) (*appendReq, error) {
	w, limit := s.writer(topic, p)
	req := &appendReq{ctx: ctx, recs: recs, limit: limit, origin: o, done: make(chan error, 1), wake: wake}
	select {
	case w <- req:
		return req, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// await waits for the outcome of req, queued with ctx (see append).
func (s *store) await(ctx context.Context, req *appendReq) error {
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
	}
	if req.state.CompareAndSwap(reqQueued, reqAbandoned) {
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	default:
		return &inDoubtError{out: req.out, cause: ctx.Err()}
	}
}

// partitionKey names a topic partition.
type partitionKey struct {
	topic     string
	partition int32
}

// writer returns the append queue of topic partition p, starting its goroutine on
// first use, and the topic's batch limit (bytes). Looked up for every message: keyed
// by topic and partition, it builds no channel name but the first time.
func (s *store) writer(topic string, p int32) (w chan *appendReq, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := partitionKey{topic, p}
	w, ok := s.writers[k]
	if !ok {
		w = make(chan *appendReq, 256)
		s.writers[k] = w
		s.wg.Add(1)
		go s.write(channel.KafkaPartition(topic, p), w)
	}
	return w, s.batchLimitLocked(topic)
}

func (s *store) write(name string, w chan *appendReq) {
	defer s.wg.Done()
	free := make(chan int, appendsInFlight)
	slots := make([]slotState, appendsInFlight)
	for i := range slots {
		free <- i
	}
	var inflight sync.WaitGroup
	defer inflight.Wait()
	// next is a request taken from w that did not fit in the last batch: it is the
	// first of the next one.
	var next *appendReq
	for {
		// A slot first, then the batch: what arrives while every slot is busy joins
		// the next Append instead of waiting behind a batch formed before it.
		var slot int
		select {
		case slot = <-free:
		case <-s.ctx.Done():
			return
		}
		first := next
		next = nil
		if first == nil {
			select {
			case first = <-w:
			case <-s.ctx.Done():
				return
			}
		}
		select {
		case s.appending <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		var once sync.Once
		release := func() { once.Do(func() { <-s.appending }) }
		batch := []*appendReq{first}
		n, size := len(first.recs), batchOverhead+recordsBytes(first.recs)
	drain:
		for n < maxBatchRecords {
			select {
			case r := <-w:
				b := recordsBytes(r.recs)
				if size+b > first.limit {
					next = r
					break drain
				}
				batch = append(batch, r)
				n += len(r.recs)
				size += b
			default:
				break drain
			}
		}
		// Requests whose callers gave up meanwhile (a listener publish already answered
		// 0x97) are not sent; the first Append lasts until the latest caller deadline.
		out := sessions.NewOutcome()
		live := batch[:0]
		deadline := time.Now().Add(s.timeout)
		latest := time.Time{}
		for _, r := range batch {
			r.out = out
			if r.ctx.Err() != nil || !r.state.CompareAndSwap(reqQueued, reqSent) {
				r.answer(r.ctx.Err())
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
			release()
			free <- slot
			continue
		}
		recs := make([]*storagev1.AppendRecord, 0, n)
		var origins []*sessions.Origin
		for _, r := range live {
			recs = append(recs, r.recs...)
			if r.origin != nil {
				origins = append(origins, r.origin)
			}
		}
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			defer func() { free <- slot }()
			defer release()
			err := s.send(name, slot, &slots[slot], recs, origins, latest, out, release)
			for _, r := range live {
				r.answer(err)
			}
		}()
	}
}

// send appends recs (holding the listener messages origins) as slot's producer (first
// attempt until deadline) and, while the answer is in doubt, sends them again,
// unchanged, until storage-core answers or the bridge stops; firstDone is called when
// the first attempt ends. It records the outcome in out and returns its error.
func (s *store) send(name string, slot int, st *slotState, recs []*storagev1.AppendRecord, origins []*sessions.Origin, deadline time.Time, out *sessions.Outcome, firstDone func()) error {
	req := &storagev1.AppendRequest{Channel: name, Records: recs}
	if ids := s.producers.Load(); ids != nil && !st.exhausted {
		req.Producer = &storagev1.AppendProducer{ProducerId: ids[slot], ProducerEpoch: int32(st.epoch), BaseSequence: st.seq}
	}
	var journalID uint64
	if s.sessions != nil && len(origins) > 0 {
		id, err := s.sessions.Sending(req, origins, out)
		if err != nil {
			err = fmt.Errorf("append %s not sent: %w", name, err)
			out.Err, out.At = err, time.Now()
			close(out.Done)
			return err
		}
		journalID = id
	}
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	// WaitForReady: while storage-core is unreachable the append waits (the
	// acknowledgement is held) until it is back or the deadline passes.
	_, err := s.storage.Append(ctx, req, grpc.WaitForReady(true))
	cancel()
	firstDone()
	if req.Producer != nil && inDoubt(err) {
		s.log.Warn("append not answered; sending it again until storage-core answers", zap.String("channel", name), zap.Int("records", len(recs)), zap.Error(err))
		err = s.untilAnswered(req, err)
	}
	switch {
	case err == nil:
		st.seq = int32((int64(st.seq) + int64(len(recs))) % (1 << 31))
		out.Stored = true
	case req.Producer != nil && status.Code(err) == codes.FailedPrecondition:
		// The channel's producer state is not ours (a sequence gap: storage-core lost
		// an append it had acknowledged, under --fsync=interval): go on with a new
		// epoch, which starts at sequence 0.
		if st.epoch == math.MaxInt16 {
			st.exhausted = true
		} else {
			st.epoch, st.seq = st.epoch+1, 0
		}
	}
	if err != nil {
		err = fmt.Errorf("append %s: %w", name, err)
		out.Err = err
	}
	out.At = time.Now()
	close(out.Done)
	if journalID != 0 && !inDoubt(err) {
		// Answered by storage-core (not left in doubt by the bridge stopping: then the
		// next process sends the batch again).
		s.sessions.Answered(journalID, out)
	}
	return err
}

// untilAnswered sends req again, unchanged, while err (its last attempt's) leaves its
// fate in doubt, until storage-core answers or the bridge stops; it returns the last
// attempt's error.
func (s *store) untilAnswered(req *storagev1.AppendRequest, err error) error {
	backoff := 100 * time.Millisecond
	for inDoubt(err) && retry(s.ctx, &backoff) {
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		_, err = s.storage.Append(ctx, req, grpc.WaitForReady(true))
		cancel()
	}
	return err
}

// resend sends req, a batch an earlier bridge process journaled with its producer
// identity and may have sent, again, unchanged, until storage-core answers or the
// bridge stops: storage-core stores it unless it has it already (a duplicate of one of
// that producer's last batches), so it ends up stored once, or refused. It returns nil
// when the batch is stored.
func (s *store) resend(req *storagev1.AppendRequest) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	_, err := s.storage.Append(ctx, req, grpc.WaitForReady(true))
	cancel()
	return s.untilAnswered(req, err)
}

// inDoubt reports whether err leaves an Append's fate unknown: anything but success
// and the refusals storage-core answers without storing anything.
func inDoubt(err error) bool {
	if err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.ResourceExhausted, codes.Unimplemented:
		return false
	}
	return true
}

func (s *store) wait() { s.wg.Wait() }
