package handler

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Pull long-poll bounds: a Pull without return_immediately waits for messages up to
// maxPullWait, or until shortly before the caller's deadline.
const (
	maxPullWait    = 30 * time.Second
	deadlineMargin = 500 * time.Millisecond
	maxPullBatch   = 1000
	// maxResponseBytes caps the message data of one Pull or StreamingPull response (one
	// message is always sent): clients' receive limits start at 20 MB.
	maxResponseBytes = 10 << 20
)

// Exactly-once failure reporting (what Google's clients parse).
const (
	eodReason         = "EXACTLY_ONCE_ACKID_FAILURE"
	eodDomain         = "pubsub.googleapis.com"
	eodInvalidAckID   = "PERMANENT_FAILURE_INVALID_ACK_ID"
	maxModAckDeadline = 600
)

// errDetached is what the verbs on a detached subscription answer: its queue holds no
// messages and refuses every queue verb.
var errDetached = status.Error(codes.FailedPrecondition, "The subscription is detached.")

// deliverable checks that a subscription can be pulled from: not detached, not push.
func deliverable(s *subInfo) error {
	if s.detached {
		return errDetached
	}
	if s.spec.GetPushConfig().GetPushEndpoint() != "" {
		return status.Error(codes.FailedPrecondition, "Pull is not allowed on a push subscription.")
	}
	return nil
}

// onDetached turns err, a failed queue verb on subscription id, into errDetached when
// the queue refused it (FAILED_PRECONDITION) because the subscription is detached.
func (h *Subscriber) onDetached(ctx context.Context, id string, err error) error {
	if status.Code(err) != codes.FailedPrecondition {
		return err
	}
	if info, e := h.subscription(ctx, id); e == nil && info.detached {
		return errDetached
	}
	return err
}

// Pull leases up to max_messages messages.
func (h *Subscriber) Pull(ctx context.Context, req *pubsubpb.PullRequest) (*pubsubpb.PullResponse, error) {
	r, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if req.GetMaxMessages() <= 0 {
		return nil, invalid("No max_messages specified")
	}
	sub, err := h.subscription(ctx, r.id)
	if err != nil {
		return nil, err
	}
	if err := deliverable(sub); err != nil {
		return nil, err
	}
	h.touch(r.id)
	wait := maxPullWait
	//lint:ignore SA1019 deprecated in pubsub.proto, but clients still send it
	if req.GetReturnImmediately() {
		wait = 0
	} else if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, max(time.Until(dl)-deadlineMargin, 0))
	}
	ds, err := h.receive(ctx, &storagev1.ReceiveRequest{
		Queue:       channel.PubSubSubscription(r.id),
		MaxMessages: min(req.GetMaxMessages(), maxPullBatch),
		MaxBytes:    maxResponseBytes,
		WaitMs:      int32(wait.Milliseconds()),
		// Read your writes, as the emulator does: messages published before the
		// Pull are in its answer, not only those the bindings copied already. A
		// stream and push keep receiving, so they have no need to wait for it.
		CatchUp: true,
	})
	if err != nil {
		return nil, backendError(ctx, err, msgSubNotFound)
	}
	out := &pubsubpb.PullResponse{ReceivedMessages: make([]*pubsubpb.ReceivedMessage, 0, len(ds))}
	for i := range ds {
		rm := ds[i].received(sub)
		h.showDeletedSchema(ctx, rm.GetMessage())
		out.ReceivedMessages = append(out.ReceivedMessages, rm)
	}
	return out, nil
}

// delivery is one message leased from storage-core: the fields of a ReceivedMessage
// the gateway uses, decoded by proto (fromProto) or straight from the wire
// (receiveReply).
type delivery struct {
	ackID     string
	attempt   int32
	sourceSeq int64
	ts        int64 // record timestamp, ms
	value     []byte
	headers   []storedHeader
}

type storedHeader struct {
	key   string
	value []byte
}

// fromProto is m as a delivery.
func fromProto(m *storagev1.ReceivedMessage) delivery {
	rec := m.GetRecord()
	d := delivery{ackID: m.GetAckId(), attempt: m.GetDeliveryAttempt(), sourceSeq: m.GetSourceSequence(), ts: rec.GetTimestampMs(), value: rec.GetValue()}
	if hs := rec.GetHeaders(); len(hs) > 0 {
		d.headers = make([]storedHeader, len(hs))
		for i, h := range hs {
			d.headers[i] = storedHeader{key: h.GetKey(), value: h.GetValue()}
		}
	}
	return d
}

// pubsubFields are the reserved headers of a delivery: its message id, publish time
// (RFC 3339; hasPublished when the header is there) and ordering key.
type pubsubFields struct {
	id, published, ordering []byte
	hasPublished            bool
}

// walkHeaders calls attr for each of d's headers that is a Pub/Sub attribute, in
// header order: one without the "_" prefix, an escaped one (hdrAttrPrefix removed),
// and the dead-letter source time (ms, formatted as RFC 3339); it returns the reserved
// fields. received and the stream encoder (streamwire.go) both read headers so.
//
// Attribute values, the message id and the ordering key are strings in Pub/Sub, but a
// native append (or a Kafka-side copy) may store any bytes in a header: those that are
// not UTF-8 are given with each run of invalid bytes replaced by U+FFFD (validUTF8), as
// proto cannot marshal them, and a message it cannot marshal would fail every Pull and
// stream that leased it, for as long as it stays in the subscription.
func (d *delivery) walkHeaders(attr func(key string, val []byte)) (f pubsubFields) {
	for _, hd := range d.headers {
		k := hd.key
		if !strings.HasPrefix(k, "_") {
			attr(k, validUTF8(hd.value))
			continue
		}
		if a, ok := strings.CutPrefix(k, hdrAttrPrefix); ok {
			attr(a, validUTF8(hd.value))
			continue
		}
		switch k {
		case hdrMessageID:
			f.id = validUTF8(hd.value)
		case hdrPublishTime:
			f.published, f.hasPublished = hd.value, true
		case hdrOrderingKey:
			f.ordering = validUTF8(hd.value)
		case hdrDeadLetterSourceTime:
			if ms, err := strconv.ParseInt(string(hd.value), 10, 64); err == nil {
				attr(deadLetterSourceTime, []byte(time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)))
			}
		}
	}
	return f
}

// validUTF8 returns v, or when v is not valid UTF-8 a copy with each run of invalid bytes
// replaced by U+FFFD.
func validUTF8(v []byte) []byte {
	if utf8.Valid(v) {
		return v
	}
	return bytes.ToValidUTF8(v, []byte("\uFFFD"))
}

// received turns the delivery into a Pub/Sub message: attributes and reserved fields
// as walkHeaders reads them; id and publish time come from the record itself for a
// native append.
func (d *delivery) received(sub *subInfo) *pubsubpb.ReceivedMessage {
	msg := &pubsubpb.PubsubMessage{Data: d.value}
	f := d.walkHeaders(func(k string, v []byte) {
		if msg.Attributes == nil {
			msg.Attributes = map[string]string{}
		}
		msg.Attributes[k] = string(v)
	})
	id, published := string(f.id), string(f.published)
	msg.OrderingKey = string(f.ordering)
	if id == "" {
		id = strconv.FormatInt(d.sourceSeq, 10)
	}
	msg.MessageId = id
	if t, err := time.Parse(time.RFC3339Nano, published); err == nil {
		msg.PublishTime = timestamppb.New(t)
	} else {
		msg.PublishTime = timestamppb.New(time.UnixMilli(d.ts))
	}
	out := &pubsubpb.ReceivedMessage{AckId: d.ackID, Message: msg}
	if sub.spec.GetDeadLetterPolicy() != nil {
		out.DeliveryAttempt = d.attempt
	}
	return out
}

func checkAckIDs(ids []string) error {
	if len(ids) == 0 {
		return invalid("No ack ids specified.")
	}
	for _, id := range ids {
		if id == "" {
			return invalid("Empty ack id.")
		}
	}
	return nil
}

// Acknowledge acks messages. On an exactly-once subscription, ack ids that are not a
// current lease fail the call with INVALID_ARGUMENT and a per-ack-id ErrorInfo. The
// storage call is coalesced with the concurrent acks of the subscription (ackbatch.go).
func (h *Subscriber) Acknowledge(ctx context.Context, req *pubsubpb.AcknowledgeRequest) (*emptypb.Empty, error) {
	r, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if err := checkAckIDs(req.GetAckIds()); err != nil {
		return nil, err
	}
	h.touch(r.id)
	results, err := h.acks.do(ctx, channel.PubSubSubscription(r.id), req.GetAckIds())
	if err != nil {
		return nil, h.onDetached(ctx, r.id, backendError(ctx, err, msgSubNotFound))
	}
	h.leasesEnded(channel.PubSubSubscription(r.id), settled(req.GetAckIds(), results))
	if err := ackFailures(req.GetAckIds(), results); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// ModifyAckDeadline extends (or with 0 nacks) leases, 0..600 s.
func (h *Subscriber) ModifyAckDeadline(ctx context.Context, req *pubsubpb.ModifyAckDeadlineRequest) (*emptypb.Empty, error) {
	r, err := parseName(req.GetSubscription(), collSubscriptions)
	if err != nil {
		return nil, err
	}
	if d := req.GetAckDeadlineSeconds(); d < 0 || d > maxModAckDeadline {
		if d < 0 {
			return nil, invalid("Ack deadline cannot be negative")
		}
		return nil, invalid("Invalid ack deadline given: %d. It must be at most %d seconds.", d, maxModAckDeadline)
	}
	if err := checkAckIDs(req.GetAckIds()); err != nil {
		return nil, err
	}
	results, err := h.modAck(ctx, r.id, req.GetAckIds(), req.GetAckDeadlineSeconds())
	if err != nil {
		return nil, err
	}
	h.touch(r.id)
	if err := ackFailures(req.GetAckIds(), results); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// modAck changes the deadline of ids (0 nacks them), coalesced with the concurrent
// modacks of the subscription to the same deadline (ackbatch.go), and returns their
// results.
func (h *Subscriber) modAck(ctx context.Context, sub string, ids []string, seconds int32) ([]storagev1.AckResult, error) {
	queue := channel.PubSubSubscription(sub)
	results, err := h.modacks.do(ctx, modAckKey{queue: queue, seconds: seconds}, ids)
	if err != nil {
		return nil, h.onDetached(ctx, sub, backendError(ctx, err, msgSubNotFound))
	}
	if seconds == 0 {
		h.leasesEnded(queue, settled(ids, results))
	} else {
		// An extension through another replica is not announced: a stream there
		// re-reads its leases when the deadline it knows passes.
		live, gone := ids, []string(nil) // all extended, the usual answer
		if !allSucceeded(results) {
			live = nil
			for i, id := range ids {
				switch result(results, i) {
				case storagev1.AckResult_ACK_RESULT_UNSPECIFIED:
					live = append(live, id)
				case storagev1.AckResult_ACK_RESULT_EXPIRED:
					gone = append(gone, id)
				}
			}
		}
		h.streams.extend(queue, live, h.now().Add(time.Duration(seconds)*time.Second))
		h.streams.done(queue, gone)
	}
	return results, nil
}

// result is the i-th ack result (success when storage-core sent fewer).
func result(results []storagev1.AckResult, i int) storagev1.AckResult {
	if i < len(results) {
		return results[i]
	}
	return storagev1.AckResult_ACK_RESULT_UNSPECIFIED
}

// splitResults sorts the distinct ack ids of a request into those acked (or modified)
// and those that failed. An id sent twice succeeds if either time did: storage-core
// settles the first and reports the repeat as expired, but the client's ack of that
// message took effect.
func splitResults(ids []string, results []storagev1.AckResult) (ok, failed []string) {
	if allSucceeded(results) {
		return ids, nil
	}
	good := make(map[string]bool, len(ids))
	for i, id := range ids {
		if result(results, i) == storagev1.AckResult_ACK_RESULT_UNSPECIFIED {
			good[id] = true
		}
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if good[id] {
			ok = append(ok, id)
		} else {
			failed = append(failed, id)
		}
	}
	return ok, failed
}

func allSucceeded(results []storagev1.AckResult) bool {
	for _, r := range results {
		if r != storagev1.AckResult_ACK_RESULT_UNSPECIFIED {
			return false
		}
	}
	return true
}

// settled returns the ack ids an ack or nack settled: all but those storage-core found
// invalid for the queue (malformed, or another subscription's). A stream's window must
// not lose a lease because a client sent its ack id to the wrong subscription.
func settled(ids []string, results []storagev1.AckResult) []string {
	if !slices.Contains(results, storagev1.AckResult_ACK_RESULT_INVALID) {
		return ids
	}
	out := ids[:0:0]
	for i, id := range ids {
		if result(results, i) != storagev1.AckResult_ACK_RESULT_INVALID {
			out = append(out, id)
		}
	}
	return out
}

// ackFailures returns the exactly-once failure status for the ack ids whose result is
// not success, or nil when all succeeded.
func ackFailures(ids []string, results []storagev1.AckResult) error {
	if allSucceeded(results) {
		return nil
	}
	_, failed := splitResults(ids, results)
	if len(failed) == 0 {
		return nil
	}
	meta := make(map[string]string, len(failed))
	for _, id := range failed {
		meta[id] = eodInvalidAckID
	}
	st, err := status.New(codes.InvalidArgument, "Some acknowledgement ids in the request were invalid. This could be because the acknowledgement ids have expired or the acknowledgement ids were malformed.").
		WithDetails(&errdetails.ErrorInfo{Reason: eodReason, Domain: eodDomain, Metadata: meta})
	if err != nil {
		return status.Error(codes.InvalidArgument, "invalid ack ids")
	}
	return st.Err()
}

// showDeletedSchema rewrites the schema attributes of a message being delivered once
// its schema was deleted: googclient_schemaname reads `_deleted-schema_` (Google,
// "Validate schemas") and googclient_schemarevisionid `_deleted-schema-revision_`, as
// the emulator delivers them. When the registry cannot be asked the attributes stay as
// published.
func (h *Subscriber) showDeletedSchema(ctx context.Context, m *pubsubpb.PubsubMessage) {
	name, ok := m.GetAttributes()[attrSchemaName]
	if !ok || name == deletedSchema {
		return
	}
	r, err := parseName(name, collSchemas)
	if err != nil {
		return
	}
	if _, err := h.revisionRange(ctx, r.id, "", ""); status.Code(err) == codes.NotFound {
		m.Attributes[attrSchemaName] = deletedSchema
		if _, ok := m.Attributes[attrSchemaRevision]; ok {
			m.Attributes[attrSchemaRevision] = deletedSchemaRevision
		}
	}
}
