package handler

import (
	"context"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/pubsubspec"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Publish limits (Google's quotas and limits page).
const (
	maxPublishMessages   = 1000
	maxPublishBytes      = 10 * 1000 * 1000
	maxAttributes        = 100
	maxAttributeKeyLen   = 256
	maxAttributeValueLen = 1024
	maxOrderingKeyLen    = 1024
)

// MaxClientMessageBytes is the largest gRPC message read from a Pub/Sub client, in
// bytes: twice Google's publish request limit, so a publish somewhat over the limit is
// still answered with Google's INVALID_ARGUMENT (validatePublish) while a bigger one is
// refused by gRPC (RESOURCE_EXHAUSTED) before it is held in memory. Google's clients
// keep every request under the publish limit (acknowledgements under 512 KiB).
const MaxClientMessageBytes = 2 * maxPublishBytes

// Reserved headers on gcp.<topic> records: visible to native readers, stripped for
// Pub/Sub clients (every header starting with "_" is).
const (
	hdrMessageID   = pubsubspec.HeaderMessageID
	hdrPublishTime = pubsubspec.HeaderPublishTime
	hdrOrderingKey = pubsubspec.HeaderOrderingKey
	// hdrDeadLetterSourceTime: see pubsubspec.HeaderDeadLetterSourceTime.
	hdrDeadLetterSourceTime = pubsubspec.HeaderDeadLetterSourceTime
	// hdrAttrPrefix escapes an attribute whose key starts with "_" (valid in Pub/Sub):
	// attribute "_k" is the header "_pubsub_attr:_k", so it reaches subscribers instead
	// of being stripped as a system header, and no attribute can forge a reserved header
	// (_pubsub_ordering_key, storage-core's _tributary_*).
	hdrAttrPrefix = "_pubsub_attr:"
)

// attrHeader is the header key of attribute key k.
func attrHeader(k string) string {
	if strings.HasPrefix(k, "_") {
		return hdrAttrPrefix + k
	}
	return k
}

// Publish validates the whole batch (limits, then the topic's schema), then appends it
// to gcp.<topic> in one call. Messages of a topic with a schema get the schema
// attributes (schemaHeaders).
func (h *Publisher) Publish(ctx context.Context, req *pubsubpb.PublishRequest) (*pubsubpb.PublishResponse, error) {
	r, err := parseName(req.GetTopic(), collTopics)
	if err != nil {
		return nil, err
	}
	if err := validatePublish(req); err != nil {
		return nil, err
	}
	t, err := h.topic(ctx, r.id)
	if err != nil {
		return nil, err
	}
	var schemaHdrs [][]*storagev1.Header
	if t.schema != nil {
		if schemaHdrs, err = h.schemaHeaders(ctx, t, req.GetMessages()); err != nil {
			return nil, err
		}
	}
	now := h.now()
	publishTime := []byte(now.UTC().Format(time.RFC3339Nano))
	ids := make([]string, len(req.GetMessages()))
	recs := make([]*storagev1.AppendRecord, len(req.GetMessages()))
	for i, m := range req.GetMessages() {
		ids[i] = strconv.FormatUint(rand.Uint64()>>1, 10)
		recs[i] = publishRecord(m, ids[i], now, publishTime)
		if schemaHdrs != nil {
			recs[i].Headers = append(recs[i].Headers, schemaHdrs[i]...)
		}
	}
	// An append racing DeleteTopic is NOT_FOUND from storage-core whenever the log goes
	// first (also while the append waits for its fsync), before the registry row does.
	if _, err := h.store.Append(ctx, &storagev1.AppendRequest{Channel: channel.PubSubTopic(r.id), Records: recs}); err != nil {
		if status.Code(err) == codes.NotFound {
			h.forget(r.id, "")
		}
		return nil, backendError(ctx, err, msgTopicNotFound)
	}
	return &pubsubpb.PublishResponse{MessageIds: ids}, nil
}

func publishRecord(m *pubsubpb.PubsubMessage, id string, now time.Time, publishTime []byte) *storagev1.AppendRecord {
	keys := make([]string, 0, len(m.GetAttributes()))
	for k := range m.GetAttributes() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	hdrs := make([]*storagev1.Header, 0, len(keys)+3)
	for _, k := range keys {
		hdrs = append(hdrs, &storagev1.Header{Key: attrHeader(k), Value: []byte(m.GetAttributes()[k])})
	}
	hdrs = append(hdrs,
		&storagev1.Header{Key: hdrMessageID, Value: []byte(id)},
		&storagev1.Header{Key: hdrPublishTime, Value: publishTime})
	rec := &storagev1.AppendRecord{TimestampMs: now.UnixMilli(), Value: m.GetData(), Headers: hdrs}
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	if ok := m.GetOrderingKey(); ok != "" {
		rec.Headers = append(rec.Headers, &storagev1.Header{Key: hdrOrderingKey, Value: []byte(ok)})
		rec.Key = []byte(ok)
	}
	return rec
}

// validatePublish checks the whole request before anything is written; the first
// failing message rejects it all (INVALID_ARGUMENT).
func validatePublish(req *pubsubpb.PublishRequest) error {
	n := len(req.GetMessages())
	if n == 0 {
		return invalid("No messages to publish")
	}
	if n > maxPublishMessages {
		return invalid("The value for message_count is too large. You passed %d in the request, but the maximum value is %d.", n, maxPublishMessages)
	}
	if size := proto.Size(req); size > maxPublishBytes {
		return invalid("The value for request_size is too large. You passed %d in the request, but the maximum value is %d.", size, maxPublishBytes)
	}
	orderingKey := ""
	for i, m := range req.GetMessages() {
		if len(m.GetData()) == 0 && len(m.GetAttributes()) == 0 {
			return invalid("Some messages are empty: message %d has neither data nor attributes", i)
		}
		if len(m.GetAttributes()) > maxAttributes {
			return invalid("The value for num_attributes is too large. You passed %d in the request, but the maximum value is %d.", len(m.GetAttributes()), maxAttributes)
		}
		for k, v := range m.GetAttributes() {
			switch {
			case k == "":
				return invalid("Message %d has an attribute with an empty key.", i)
			case len(k) > maxAttributeKeyLen:
				return invalid("The value for attribute_key_size is too large. You passed %d in the request, but the maximum value is %d.", len(k), maxAttributeKeyLen)
			case strings.HasPrefix(strings.ToLower(k), "goog"):
				return invalid("The attribute key %q is reserved: keys may not start with \"goog\".", k)
			case len(v) > maxAttributeValueLen:
				return invalid("The value for attribute_value_size is too large. You passed %d in the request, but the maximum value is %d.", len(v), maxAttributeValueLen)
			}
		}
		key := m.GetOrderingKey()
		if len(key) > maxOrderingKeyLen {
			return invalid("The value for ordering_key_size is too large. You passed %d in the request, but the maximum value is %d.", len(key), maxOrderingKeyLen)
		}
		if key != "" {
			if orderingKey != "" && key != orderingKey {
				return invalid("All messages in a publish request with ordering keys must have the same ordering key.")
			}
			orderingKey = key
		}
	}
	return nil
}
