package handler

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// StreamingPull timings.
const (
	// streamPollWait is each long-poll Receive's wait; the queue wakes it at once when a
	// message becomes available.
	streamPollWait = 5 * time.Second
	// leaseRecheck is how often a stream whose window is full re-reads its leases from
	// storage-core when no wake-up comes: the polling fallback while NATS is down (acks
	// through other replicas are seen this late), and how far ahead a lease deadline
	// read from storage-core is next checked. leaseRecheckLive is the safety re-read
	// while NATS is up, in case an announcement was lost.
	leaseRecheck     = time.Second
	leaseRecheckLive = 5 * time.Second
	// leaseRefreshGap is the least time between two re-reads of one stream's leases, so
	// a burst of wake-ups (acks arrive every 100 ms from the Go client) costs one.
	leaseRefreshGap = 50 * time.Millisecond
	// backendRetry is the pause after a failed Receive before the stream gives up.
	backendRetry = 200 * time.Millisecond
	// releaseTimeout bounds the nack of messages a closing stream could not send.
	releaseTimeout = 5 * time.Second
	// streamReceivers is how many Receive calls a stream keeps in flight. Each waits
	// for storage-core to make its delivery counts durable (an fsync) and to send the
	// answer; with one, a stream idled through every such wait (its receive loop was
	// blocked 77% of the time in a profile while the machine had CPU to spare), with
	// two the next batch is leased meanwhile. Both take their room from one window.
	streamReceivers = 2
	// maxStreamBatch is the most messages one Receive of a stream asks for (storage-
	// core allows 10,000): fewer, larger answers cost fewer round trips and fsyncs
	// per message than unary Pull's 1,000.
	maxStreamBatch = 2500
	// firstStreamBatch is the most messages a stream's first Receive asks for; each
	// later one may ask twice as many as the one before, up to maxStreamBatch. A
	// client sees no message of a response before all of it arrived, through a
	// connection whose flow-control window starts at 64 KiB: a full first batch of
	// 2,500 1-KiB messages kept the Go client idle for its first 30 ms.
	firstStreamBatch = 100
	// maxLeaseQuery is the most ack ids one GetLeases asks about (storage-core's bound).
	maxLeaseQuery = 10_000
)

// StreamingPull delivers messages over a bidirectional stream: the first request names
// the subscription and the stream's ack deadline (10..600 s) and flow control
// (max_outstanding_messages/bytes, each <= 0 for none: google/pubsub/v1); later
// requests carry acks, deadline changes and keepalives (empty requests, answered with
// an empty response so the client sees the stream alive); a later request that sets a
// subscription or flow control is INVALID_ARGUMENT (google/pubsub/v1). The first response carries
// the subscription's properties.
//
// Flow control is Google's: once max_outstanding_messages messages, or
// max_outstanding_bytes bytes, sent on the stream are neither acked, nacked (a deadline
// of 0) nor past their lease, nothing more is sent until one is; a message larger than
// max_outstanding_bytes goes out alone, when nothing else is outstanding. A message's
// bytes are its stored ones (data, attributes and the reserved headers: see
// storedSize), at least the data size the Go client counts. The stream never leases
// more than it may send, so what it holds back stays available to the subscription's
// other streams.
func (h *Subscriber) StreamingPull(ss pubsubpb.Subscriber_StreamingPullServer) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	first, err := ss.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if first.GetSubscription() == "" {
		return invalid("first message must set subscription")
	}
	r, err := parseName(first.GetSubscription(), collSubscriptions)
	if err != nil {
		return err
	}
	if d := first.GetStreamAckDeadlineSeconds(); d < minAckDeadline || d > maxAckDeadline {
		return invalid("stream_ack_deadline_seconds must be between %d and %d seconds, got %d", minAckDeadline, maxAckDeadline, d)
	}
	sub, err := h.subscription(ctx, r.id)
	if err != nil {
		return err
	}
	if err := deliverable(sub); err != nil {
		return err
	}
	h.touch(r.id)
	st := &stream{
		h: h, ss: ss, sub: sub, queue: channel.PubSubSubscription(r.id),
		maxMsgs: first.GetMaxOutstandingMessages(), maxBytes: first.GetMaxOutstandingBytes(),
		outstanding: map[string]lease{}, wake: make(chan struct{}, 1), wakeOthers: make(chan struct{}, streamReceivers-1),
		props: &pubsubpb.StreamingPullResponse_SubscriptionProperties{
			ExactlyOnceDeliveryEnabled: sub.spec.GetEnableExactlyOnceDelivery(),
			MessageOrderingEnabled:     sub.spec.GetEnableMessageOrdering(),
		},
	}
	if h.encodeStreams {
		st.enc = &streamEncoder{h: h, sub: sub, props: st.props}
	}
	st.deadline.Store(first.GetStreamAckDeadlineSeconds())
	h.budget.streams.Add(1)
	defer h.budget.streams.Add(-1)
	if st.limited() {
		h.listeners.add(st)
		defer h.listeners.remove(st)
		h.streams.add(st)
		defer h.streams.drop(st)
	}
	if err := st.send(&pubsubpb.StreamingPullResponse{}); err != nil {
		return err
	}
	if err := st.handle(ctx, first); err != nil {
		return err
	}
	// The first loop to end ends the stream. The other is not waited for: a readLoop
	// blocked in Recv returns only once this handler has returned; both stop sending
	// (closed) and wind down on the cancelled context.
	errc := make(chan error, 2)
	go func() { errc <- st.readLoop(ctx) }()
	go func() { errc <- st.deliverLoop(ctx) }()
	err = <-errc
	cancel()
	st.close()
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// errStreamClosed is returned by send once the stream's handler has returned.
var errStreamClosed = errors.New("stream closed")

// lease is one message delivered on a stream and not yet known to be settled: its
// flow-control bytes and its deadline (Unix ns; until). Two words without pointers: a
// map slot of 32 bytes, not 48 with a time.Time, for maps of thousands that each
// stream fills and grows (tracking leases took about a seventh of the gateway's CPU
// under StreamingPull).
type lease struct {
	bytes    int64
	deadline int64
}

func (l lease) until() time.Time { return time.Unix(0, l.deadline) }

type stream struct {
	h     *Subscriber
	ss    pubsubpb.Subscriber_StreamingPullServer
	sub   *subInfo
	queue string
	props *pubsubpb.StreamingPullResponse_SubscriptionProperties
	// enc encodes the stream's batches (Deps.EncodeStreams; nil: proto messages); the
	// first receive loop's, the others make their own (an encoder is not shared).
	enc *streamEncoder

	deadline atomic.Int32 // stream ack deadline, seconds

	sendMu sync.Mutex
	closed bool // set when the handler returns; no Send after that

	mu          sync.Mutex
	maxMsgs     int64 // the window: the client's max_outstanding_messages/bytes (<= 0: none)
	maxBytes    int64
	outstanding map[string]lease
	count       int64
	bytes       int64
	// reserved, reservedBytes are the window room taken by Receive calls in flight
	// (window), given back when their answer is tracked or dropped.
	reserved, reservedBytes int64
	// batchLimit is the most messages the next Receive asks for (firstStreamBatch,
	// doubling per Receive up to maxStreamBatch; zero: not started).
	batchLimit int32
	// wake holds a wake-up for the first receive loop, the refresher, and wakeOthers
	// one for each other loop (notify fills both): a wake-up that says leases ended
	// elsewhere must reach the refresher, not be taken by a loop that cannot act on it.
	wake, wakeOthers chan struct{}
	// nextBound is at or before the earliest deadline in outstanding (zero: none
	// tracked); window scans for the exact one only once it has passed.
	nextBound time.Time

	// stale is set by a wake-up: leases of the queue ended elsewhere, re-read them.
	stale atomic.Bool
	// refreshedAt is when the leases were last re-read (the first receive loop only:
	// the refresher).
	refreshedAt time.Time
	// held is the message bytes leased for the stream and not yet sent (holdBudget).
	held atomic.Int64
}

// batch is one response on its way to the client: a proto message (out), or one the
// stream encoded (wire, streamwire.go), or the error encoding it gave (err: the
// sender fails the stream with it, as a failed Send); ids are its ack ids, bytes the
// message bytes it holds.
type batch struct {
	out   *pubsubpb.StreamingPullResponse
	wire  *wireResponse
	err   error
	ids   []string
	bytes int64
}

// free drops the batch's encoded buffer once it is sent or given up.
func (b batch) free() {
	if b.wire != nil {
		b.wire.free()
	}
}

// limited reports whether the client asked for flow control (the stream then tracks
// its leases).
func (s *stream) limited() bool { return s.maxMsgs > 0 || s.maxBytes > 0 }

func (s *stream) send(resp *pubsubpb.StreamingPullResponse) error {
	resp.SubscriptionProperties = s.props
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	return s.ss.Send(resp)
}

// sendBatch sends b's response (or fails with its encoding error).
func (s *stream) sendBatch(b batch) error {
	if b.err != nil {
		return b.err
	}
	if b.wire == nil {
		return s.send(b.out)
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if s.closed {
		return errStreamClosed
	}
	return s.ss.SendMsg(b.wire)
}

func (s *stream) close() {
	s.sendMu.Lock()
	s.closed = true
	s.sendMu.Unlock()
}

func (s *stream) readLoop(ctx context.Context) error {
	for {
		req, err := s.ss.Recv()
		if err != nil {
			return err
		}
		s.h.touch(s.sub.id) // acks, modacks and keepalives keep an open stream active
		if req.GetSubscription() != "" {
			// Google: "must not be set in subsequent requests"; the emulator refuses
			// it too, even naming the stream's own subscription.
			return invalid("subscription may only be set in first message")
		}
		if req.GetMaxOutstandingMessages() != 0 || req.GetMaxOutstandingBytes() != 0 {
			// google/pubsub/v1: flow control "can only be set on the initial
			// StreamingPullRequest. If it is set on a subsequent request, the stream
			// will be aborted with status INVALID_ARGUMENT."
			return invalid("max_outstanding_messages and max_outstanding_bytes may only be set in first message")
		}
		if err := s.handle(ctx, req); err != nil {
			return err
		}
	}
}

// handle applies one client request: stream deadline change, acks, deadline
// modifications; an empty request is a keepalive and is answered.
func (s *stream) handle(ctx context.Context, req *pubsubpb.StreamingPullRequest) error {
	if d := req.GetStreamAckDeadlineSeconds(); d != 0 {
		if d < minAckDeadline || d > maxAckDeadline {
			return invalid("Invalid stream_ack_deadline_seconds: %d. It must be between %d and %d.", d, minAckDeadline, maxAckDeadline)
		}
		s.deadline.Store(d)
	}
	if len(req.GetModifyDeadlineAckIds()) != len(req.GetModifyDeadlineSeconds()) {
		return invalid("modify_deadline_ack_ids and modify_deadline_seconds must have the same length (%d != %d).", len(req.GetModifyDeadlineAckIds()), len(req.GetModifyDeadlineSeconds()))
	}
	confirm := &pubsubpb.StreamingPullResponse{}
	if ids := req.GetAckIds(); len(ids) > 0 {
		results, err := s.h.acks.do(ctx, s.queue, ids)
		if err != nil {
			return backendError(ctx, err, msgSubNotFound)
		}
		s.h.leasesEnded(s.queue, settled(ids, results))
		if s.props.ExactlyOnceDeliveryEnabled {
			ok, failed := splitResults(ids, results)
			confirm.AcknowledgeConfirmation = &pubsubpb.StreamingPullResponse_AcknowledgeConfirmation{AckIds: ok, InvalidAckIds: failed}
		}
	}
	bySeconds := map[int32][]string{}
	var order []int32
	for i, id := range req.GetModifyDeadlineAckIds() {
		sec := req.GetModifyDeadlineSeconds()[i]
		if sec < 0 || sec > maxModAckDeadline {
			return invalid("Invalid ack deadline given: %d. It must be between 0 and %d seconds.", sec, maxModAckDeadline)
		}
		if _, ok := bySeconds[sec]; !ok {
			order = append(order, sec)
		}
		bySeconds[sec] = append(bySeconds[sec], id)
	}
	for _, sec := range order {
		ids := bySeconds[sec]
		results, err := s.h.modAck(ctx, s.sub.id, ids, sec)
		if err != nil {
			return err
		}
		if s.props.ExactlyOnceDeliveryEnabled {
			if confirm.ModifyAckDeadlineConfirmation == nil {
				confirm.ModifyAckDeadlineConfirmation = &pubsubpb.StreamingPullResponse_ModifyAckDeadlineConfirmation{}
			}
			c := confirm.ModifyAckDeadlineConfirmation
			ok, failed := splitResults(ids, results)
			c.AckIds = append(c.AckIds, ok...)
			c.InvalidAckIds = append(c.InvalidAckIds, failed...)
		}
	}
	if confirm.AcknowledgeConfirmation != nil || confirm.ModifyAckDeadlineConfirmation != nil {
		return s.send(confirm)
	}
	if isKeepalive(req) {
		return s.send(&pubsubpb.StreamingPullResponse{})
	}
	return nil
}

func isKeepalive(req *pubsubpb.StreamingPullRequest) bool {
	return req.GetSubscription() == "" && len(req.GetAckIds()) == 0 && len(req.GetModifyDeadlineAckIds()) == 0
}

// window returns how many messages and bytes the stream may still take (at most one
// Receive's worth: batchLimit, which each call doubles up to maxStreamBatch), whether
// the Receive must hold to those bytes exactly (exact: a byte limit, and messages
// outstanding or reserved, so not even a lone larger message may come), whether the
// window is full, and a time at or before the earliest lease deadline it knows, exact
// once that time has passed (zero when it tracks none). The window is the client's
// limits (maxMsgs, maxBytes) less what is outstanding and what Receive calls in
// flight reserved. Unless full, the room returned is reserved too: the caller gives it
// back with unreserve, or trackAll, once its Receive has answered.
func (s *stream) window() (msgs int32, bytes int64, exact bool, next time.Time, full bool) {
	now := s.h.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.nextBound.IsZero() && !now.Before(s.nextBound) {
		s.nextBound = s.earliestLocked()
	}
	next = s.nextBound
	if s.batchLimit == 0 {
		s.batchLimit = firstStreamBatch
	}
	msgs = s.batchLimit
	if s.maxMsgs > 0 {
		if s.count+s.reserved >= s.maxMsgs {
			return 0, 0, false, next, true
		}
		msgs = int32(min(int64(msgs), s.maxMsgs-s.count-s.reserved))
	}
	bytes = maxResponseBytes
	if s.maxBytes > 0 {
		if s.bytes+s.reservedBytes >= s.maxBytes {
			return 0, 0, false, next, true
		}
		bytes = min(bytes, s.maxBytes-s.bytes-s.reservedBytes)
		exact = s.count > 0 || s.reserved > 0
	}
	s.reserved += int64(msgs)
	s.reservedBytes += bytes
	s.batchLimit = min(2*s.batchLimit, maxStreamBatch)
	return msgs, bytes, exact, next, false
}

// unreserve gives back room window reserved for a Receive (msgs messages, bytes bytes).
func (s *stream) unreserve(msgs int32, bytes int64) {
	s.mu.Lock()
	s.reserved -= int64(msgs)
	s.reservedBytes -= bytes
	s.mu.Unlock()
}

// earliestLocked returns the earliest deadline in outstanding (zero: none).
func (s *stream) earliestLocked() time.Time {
	var next time.Time
	for _, l := range s.outstanding {
		if d := l.until(); next.IsZero() || d.Before(next) {
			next = d
		}
	}
	return next
}

// recheck is how long a full window waits for a wake-up before re-reading its leases.
func (s *stream) recheck() time.Duration {
	if s.h.announceLive() {
		return leaseRecheckLive
	}
	return leaseRecheck
}

// refreshDue reports whether the leases should be re-read now: a wake-up said leases
// of the queue ended elsewhere, a deadline the stream knows passed (another replica may
// have extended it), or the window is full and the recheck interval passed. Never
// twice within leaseRefreshGap.
func (s *stream) refreshDue(now, next time.Time, full bool) bool {
	if now.Sub(s.refreshedAt) < leaseRefreshGap {
		return false
	}
	s.mu.Lock()
	n := len(s.outstanding)
	s.mu.Unlock()
	if n == 0 {
		s.stale.Store(false)
		return false
	}
	switch {
	case s.stale.Swap(false):
		return true
	case !next.IsZero() && !now.Before(next):
		return true
	case full && now.Sub(s.refreshedAt) >= s.recheck():
		return true
	}
	return false
}

// refreshLeases re-reads from storage-core which outstanding ack ids are still leased
// and until when: the others leave the window. Ids storage-core could not be asked
// about (it failed) leave it once past the deadline the stream knows, as they would
// without re-reads.
func (s *stream) refreshLeases(ctx context.Context) {
	s.mu.Lock()
	ids := make([]string, 0, len(s.outstanding))
	for id := range s.outstanding {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	answers := make(map[string]int64, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), maxLeaseQuery)
		resp, err := s.h.queues.GetLeases(ctx, &storagev1.GetLeasesRequest{Queue: s.queue, AckIds: ids[:n]})
		if err != nil {
			if ctx.Err() == nil {
				s.h.log.Debug("could not re-read stream leases", zap.String("queue", s.queue), zap.Error(err))
			}
			break
		}
		for i, d := range resp.GetDeadlinesMs() {
			if i < n {
				answers[ids[i]] = d
			}
		}
		ids = ids[n:]
	}
	now := s.h.now()
	s.refreshedAt = now
	s.mu.Lock()
	for id, l := range s.outstanding {
		d, asked := answers[id]
		switch {
		case asked && d == 0, !asked && now.After(l.until()):
			s.forgetLocked(id, l)
		case asked:
			// Next looked at no sooner than leaseRecheck from now: the deadline is
			// storage-core's clock, and its expiry is announced by the sweep anyway.
			l.deadline = time.UnixMilli(d).UnixNano()
			if soon := now.Add(leaseRecheck).UnixNano(); l.deadline < soon {
				l.deadline = soon
			}
			s.outstanding[id] = l
		}
	}
	s.nextBound = s.earliestLocked()
	s.mu.Unlock()
}

// pause waits until a wake-up of the loop, ctx's end, or the recheck; the refresher
// (the receive loop that re-reads the leases) also for what only it acts on: the next
// deadline the window knows, and the end of the refresh gap when a wake-up is pending.
func (s *stream) pause(ctx context.Context, now, next time.Time, refresher bool) {
	d := s.recheck()
	wake := s.wakeOthers
	if refresher {
		wake = s.wake
		if !next.IsZero() {
			d = min(d, next.Sub(now))
		}
		if s.stale.Load() {
			d = min(d, s.refreshedAt.Add(leaseRefreshGap).Sub(now))
		}
	}
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

func (s *stream) forgetLocked(id string, l lease) {
	delete(s.outstanding, id)
	s.count--
	s.bytes -= l.bytes
}

func (s *stream) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case s.wakeOthers <- struct{}{}: // a nil wakeOthers (tests' streams) is never ready
	default:
	}
}

// deliverLoop receives from the queue in streamReceivers receive loops and hands each
// batch to a sender goroutine, so the next Receives overlap the previous batch's Send
// and each other's waits. Batches of the loops may reach the client in any order;
// ordering keys still arrive in order, since storage-core leases a key's next message
// only once the one before is acked.
func (s *stream) deliverLoop(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan batch, 1)
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				sendErr <- nil
				return
			case b := <-batches:
				err := s.sendBatch(b)
				b.free()
				if err != nil {
					s.release(b.ids)
				}
				s.unhold(b.bytes)
				if err != nil {
					cancel()
					sendErr <- err
					return
				}
			}
		}
	}()
	errs := make(chan error, streamReceivers)
	for i := range streamReceivers {
		enc := s.enc
		if i > 0 && enc != nil {
			enc = &streamEncoder{h: s.h, sub: s.sub, props: s.props}
		}
		go func() { errs <- s.receiveLoop(ctx, batches, enc, i == 0) }()
	}
	var err error
	for range streamReceivers {
		if e := <-errs; e != nil && err == nil {
			err = e
			cancel() // one loop failing ends the stream
		}
	}
	cancel()
	serr := <-sendErr
	for len(batches) > 0 {
		b := <-batches
		b.free()
		s.release(b.ids)
		s.unhold(b.bytes)
	}
	if serr != nil {
		return serr
	}
	return err
}

// release nacks messages leased for the stream but never sent to its client, so they
// (and, with ordering, their keys' later messages) are redelivered at once rather than
// after the lease.
func (s *stream) release(ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if _, err := s.h.modAck(ctx, s.sub.id, ids, 0); err != nil {
		s.h.log.Warn("could not release unsent messages; they return after their lease", zap.String("queue", s.queue), zap.Int("messages", len(ids)), zap.Error(err))
	}
}

// receiveLoop leases messages for the stream while its window and its share of the
// replica's hold budget have room, re-reading its leases when told or due.
func (s *stream) receiveLoop(ctx context.Context, batches chan<- batch, enc *streamEncoder, refresher bool) error {
	limited := s.limited()
	failing := false // Receive failed UNAVAILABLE last time
	for ctx.Err() == nil {
		now := s.h.now()
		msgs, bytes, exact, next, full := s.window()
		if refresher && limited && s.refreshDue(now, next, full) {
			s.unreserve(msgs, bytes)
			s.refreshLeases(ctx)
			continue
		}
		room := s.room()
		if full || room <= 0 {
			s.unreserve(msgs, bytes)
			s.pause(ctx, now, next, refresher)
			continue
		}
		// The hold budget is reserved too (ask), then trued up to what the answer holds.
		ask := min(bytes, room)
		s.hold(ask)
		deadline := s.deadline.Load()
		r, err := s.h.receiveReply(ctx, &storagev1.ReceiveRequest{
			Queue: s.queue, MaxMessages: msgs, MaxBytes: ask, ExactMaxBytes: exact,
			AckDeadlineMs: deadline * 1000, WaitMs: int32(streamPollWait.Milliseconds()),
		}, enc != nil)
		if err != nil {
			s.unreserve(msgs, bytes)
			s.unhold(ask)
			if ctx.Err() != nil {
				return nil
			}
			if status.Code(err) == codes.Unavailable {
				// Once per outage per stream: retrying every 200 ms, hundreds of streams
				// would otherwise log thousands of lines a second while storage-core is
				// down.
				if !failing && refresher { // one line per stream, not per receive loop
					s.h.log.Warn("streaming pull receive failed, retrying", zap.String("queue", s.queue), zap.Error(err))
				}
				failing = true
				t := time.NewTimer(backendRetry)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
				continue
			}
			return backendError(ctx, err, msgSubNotFound)
		}
		if failing && refresher {
			s.h.log.Info("streaming pull receive recovered", zap.String("queue", s.queue))
		}
		failing = false
		if len(r.msgs) == 0 {
			s.unreserve(msgs, bytes)
			s.unhold(ask)
			r.free()
			if r.nextBytes > 0 {
				// The next message does not fit beside those outstanding (storage-core
				// answered at once): wait for them to settle.
				s.pause(ctx, now, next, refresher)
			}
			continue
		}
		until := s.h.now().Add(time.Duration(deadline) * time.Second)
		b, sizes := s.batch(ctx, enc, r.msgs)
		r.free() // the batch does not refer to the deliveries
		// True the hold up before the reservation ends: a stream at its share with no
		// Receive in flight leases nothing more.
		s.hold(b.bytes - ask)
		if limited && b.err == nil {
			s.trackAll(b.ids, sizes, until, msgs, bytes)
		} else {
			s.unreserve(msgs, bytes)
		}
		select {
		case batches <- b:
		case <-ctx.Done():
			b.free()
			s.release(b.ids)
			s.unhold(b.bytes)
			return nil
		}
	}
	return nil
}

// batch turns ds into the response to send, encoded by enc when the stream encodes
// (enc is the calling receive loop's), and returns it with each message's
// flow-control size (storedSize, bytes).
func (s *stream) batch(ctx context.Context, enc *streamEncoder, ds []delivery) (batch, []int64) {
	b := batch{ids: make([]string, len(ds))}
	sizes := make([]int64, len(ds))
	for i := range ds {
		b.ids[i] = ds[i].ackID
		sizes[i] = storedSize(&ds[i])
	}
	if enc != nil {
		w, total, err := enc.encode(ctx, ds)
		if err != nil {
			// What gRPC's Send answers a message proto cannot marshal.
			b.err = status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
			return b, nil
		}
		b.wire, b.bytes = w, total
		return b, sizes
	}
	b.out = &pubsubpb.StreamingPullResponse{ReceivedMessages: make([]*pubsubpb.ReceivedMessage, 0, len(ds))}
	for i := range ds {
		rm := ds[i].received(s.sub)
		s.h.showDeletedSchema(ctx, rm.GetMessage())
		b.out.ReceivedMessages = append(b.out.ReceivedMessages, rm)
		b.bytes += int64(proto.Size(rm.GetMessage()))
	}
	return b, sizes
}

// storedSize is a delivery's flow-control size in bytes: its value (the data) and its
// headers' names and values (attributes and the reserved _pubsub_ headers), as
// storage-core's max_bytes counts it but for the record key (for a Pub/Sub publish,
// the ordering key, also a header). Never less than the data size the Go client's
// flow control counts, nor more than storage-core counts, so a Receive's max_bytes
// bounds it.
func storedSize(d *delivery) int64 {
	n := int64(len(d.value))
	for _, h := range d.headers {
		n += int64(len(h.key) + len(h.value))
	}
	return n
}

// trackAll tracks the leases ids (sizes[i] bytes each) until the deadline and gives
// back the room their Receive reserved (reserved messages, reservedBytes bytes; see
// window), under one lock. Each id is copied: the ids of a Receive answer share one
// string (receiveReply), which a single lease kept here for long would keep whole.
func (s *stream) trackAll(ids []string, sizes []int64, until time.Time, reserved int32, reservedBytes int64) {
	s.mu.Lock()
	s.reserved -= int64(reserved)
	s.reservedBytes -= reservedBytes
	for i, id := range ids {
		s.trackLocked(strings.Clone(id), sizes[i], until)
	}
	s.mu.Unlock()
}

func (s *stream) track(id string, size int64, until time.Time) {
	s.mu.Lock()
	s.trackLocked(id, size, until)
	s.mu.Unlock()
}

func (s *stream) trackLocked(id string, size int64, until time.Time) {
	s.outstanding[id] = lease{bytes: size, deadline: until.UnixNano()}
	if s.nextBound.IsZero() || until.Before(s.nextBound) {
		s.nextBound = until
	}
	s.count++
	s.bytes += size
}

// streamBook lists this replica's streams that track leases, by queue, so an ack or
// modack arriving through any RPC of this replica updates the window of the stream
// that delivered the message. An ack id is looked up in the streams of its queue,
// starting with the one that last held one (a client's ack batch is one stream's).
type streamBook struct {
	mu      sync.Mutex
	byQueue map[string][]*stream
}

func newStreamBook() *streamBook { return &streamBook{byQueue: map[string][]*stream{}} }

func (b *streamBook) add(s *stream) {
	b.mu.Lock()
	b.byQueue[s.queue] = append(b.byQueue[s.queue], s)
	b.mu.Unlock()
}

// drop removes a finished stream. The list is copied, not changed in place: visit
// walks the list it read without b.mu (add only appends past its length).
func (b *streamBook) drop(s *stream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := slices.DeleteFunc(slices.Clone(b.byQueue[s.queue]), func(x *stream) bool { return x == s })
	if len(ss) == 0 {
		delete(b.byQueue, s.queue)
	} else {
		b.byQueue[s.queue] = ss
	}
}

// visit calls fn with the stream of queue that tracks ids[i], for each i (under that
// stream's mu), and returns the ids no stream tracks, in their order. Each stream is
// locked once for all the ids it is asked about: first the one tracking the first id
// found (a client's ack batch is mostly one stream's), then, for the ids it does not
// track, the others in turn.
func (b *streamBook) visit(queue string, ids []string, fn func(s *stream, id string, l lease)) (untracked []string) {
	b.mu.Lock()
	ss := b.byQueue[queue]
	b.mu.Unlock()
	if len(ss) == 0 || len(ids) == 0 {
		return ids
	}
	first := 0
	if len(ss) > 1 {
		first = -1
		for k := 0; first < 0 && k < len(ids); k++ {
			for i, s := range ss {
				s.mu.Lock()
				_, ok := s.outstanding[ids[k]]
				s.mu.Unlock()
				if ok {
					first = i
					break
				}
			}
		}
		if first < 0 {
			return ids
		}
	}
	pending := ids
	var spare []string // a list of ids no longer read, reused (never ids itself)
	for n := 0; n < len(ss) && len(pending) > 0; n++ {
		s := ss[(first+n)%len(ss)]
		var miss []string
		s.mu.Lock()
		for i, id := range pending {
			if l, ok := s.outstanding[id]; ok {
				fn(s, id, l)
				continue
			}
			if miss == nil {
				if cap(spare) >= len(pending)-i {
					miss = spare[:0]
				} else {
					miss = make([]string, 0, len(pending)-i)
				}
			}
			miss = append(miss, id)
		}
		s.mu.Unlock()
		if n > 0 {
			spare = pending
		}
		pending = miss
	}
	return pending
}

// done settles ack ids of queue (acked or nacked), waking the streams they free, and
// returns those no stream of this replica tracks.
func (b *streamBook) done(queue string, ids []string) (untracked []string) {
	var touched []*stream
	untracked = b.visit(queue, ids, func(s *stream, id string, l lease) {
		s.forgetLocked(id, l)
		if !slices.Contains(touched, s) {
			touched = append(touched, s)
		}
	})
	for _, s := range touched {
		s.notify()
	}
	return untracked
}

// extend moves the deadline of ack ids of queue.
func (b *streamBook) extend(queue string, ids []string, until time.Time) {
	ns := until.UnixNano()
	b.visit(queue, ids, func(s *stream, id string, l lease) {
		l.deadline = ns
		s.outstanding[id] = l
		if until.Before(s.nextBound) {
			s.nextBound = until // a shorter deadline than the stream knew
		}
	})
}
