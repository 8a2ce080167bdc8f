package bridge

// The listener's retained messages in a compacted topic (listener.retained.store
// kafka): each retained PUBLISH, and each clear as a tombstone, is a record keyed by
// its MQTT topic, read back before the listener accepts a client and followed while
// it runs, so that every replica reading the topic serves the same retained set.

import (
	"context"
	"fmt"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// retainedReadBatch is how many records one Read of the retained topic returns at most.
const retainedReadBatch = 1000

// retainedLog is the retained topic (one partition) of a listener.
type retainedLog struct {
	l     *listener
	topic string
	ch    string
	log   *zap.Logger
	// next is the sequence to read next; the follower owns it after load.
	next int64
}

func newRetainedLog(l *listener, topic string) *retainedLog {
	if topic == "" {
		topic = config.DefaultRetainedTopic
	}
	return &retainedLog{l: l, topic: topic, ch: channel.KafkaPartition(topic, 0), log: l.log.With(zap.String("retained_topic", topic))}
}

// record is the retained topic's record for pk: key its topic, value its payload (a
// tombstone, no value, when the payload is empty: the topic's retained message is
// cleared), its QoS and MQTT 5 properties as mqtt-* headers (those of mqtt-to-kafka's
// `headers: all`).
func (r *retainedLog) record(cl *mqtt.Client, pk packets.Packet) *storagev1.AppendRecord {
	rec := &storagev1.AppendRecord{TimestampMs: time.Now().UnixMilli(), Key: []byte(pk.TopicName)}
	if len(pk.Payload) == 0 {
		return rec
	}
	rec.Value = pk.Payload
	rec.Headers = mapping.MetadataHeaders(fromMochi(cl, pk))
	return rec
}

// packet is the retained message a record of the topic holds (empty payload: cleared).
func packet(rec *storagev1.Record) packets.Packet {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true},
		TopicName:   string(rec.GetKey()),
		Payload:     rec.GetValue(),
		Created:     rec.GetTimestampMs() / 1000,
	}
	if len(pk.Payload) == 0 {
		return pk
	}
	var m mapping.Message
	mapping.Restore(&m, rec.GetHeaders())
	pk.FixedHeader.Qos = m.QoS
	pk.Properties = packets.Properties{ContentType: m.ContentType, CorrelationData: m.CorrelationData, ResponseTopic: m.ResponseTopic}
	if m.PayloadFormatIndicator != nil {
		pk.Properties.PayloadFormat, pk.Properties.PayloadFormatFlag = *m.PayloadFormatIndicator, true
	}
	if m.MessageExpiryInterval != nil {
		pk.Properties.MessageExpiryInterval = *m.MessageExpiryInterval
	}
	for _, u := range m.UserProperties {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: u.Key, Val: u.Value})
	}
	return pk
}

// ensureTopic creates the topic, one partition and cleanup.policy=compact, when it
// does not exist.
func (r *retainedLog) ensureTopic(ctx context.Context) error {
	coord := r.l.b.coord
	resp, err := coord.GetTopics(ctx, &coordinatorv1.GetTopicsRequest{Names: []string{r.topic}}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("coordinator GetTopics %s: %w", r.topic, err)
	}
	for _, t := range resp.GetTopics() {
		if t.GetName() == r.topic && t.GetErrorCode() == 0 && t.GetPartitions() > 0 {
			return nil
		}
	}
	cr, err := coord.CreateTopics(ctx, &coordinatorv1.CreateTopicsRequest{Topics: []*coordinatorv1.CreatableTopic{{
		Name: r.topic, Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"},
	}}})
	if err != nil {
		return fmt.Errorf("coordinator CreateTopics %s: %w", r.topic, err)
	}
	for _, res := range cr.GetResults() {
		if c := res.GetErrorCode(); c != 0 && c != kafkaTopicAlreadyExists {
			return fmt.Errorf("create topic %s: kafka error %d: %s", r.topic, c, res.GetErrorMessage())
		}
	}
	r.log.Info("created the retained topic (cleanup.policy=compact)")
	return nil
}

// load reads the topic from its start to its end as the listener starts, and returns
// the retained set it holds: per MQTT topic, the newest record unless a tombstone.
func (r *retainedLog) load(ctx context.Context) ([]packets.Packet, error) {
	if err := r.ensureTopic(ctx); err != nil {
		return nil, err
	}
	gc, err := r.l.b.storage.GetChannel(ctx, &storagev1.GetChannelRequest{Name: r.ch}, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("retained topic %s: %w", r.topic, err)
	}
	end := gc.GetChannel().GetHighWatermark()
	r.next = max(gc.GetChannel().GetLogStartSequence(), 1)
	set := map[string]packets.Packet{}
	var order []string
	for r.next <= end {
		recs, err := r.read(ctx, 0)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			pk := packet(rec)
			if _, ok := set[pk.TopicName]; !ok {
				order = append(order, pk.TopicName)
			}
			set[pk.TopicName] = pk
		}
	}
	out := make([]packets.Packet, 0, len(set))
	for _, t := range order {
		if pk := set[t]; len(pk.Payload) > 0 {
			out = append(out, pk)
		}
	}
	r.log.Info("retained messages read back", zap.Int("retained", len(out)), zap.Int64("to_sequence", end))
	return out, nil
}

// read returns the next records (control records left out) and moves next past them.
func (r *retainedLog) read(ctx context.Context, waitMs int32) ([]*storagev1.Record, error) {
	resp, err := r.l.b.storage.Read(ctx, &storagev1.ReadRequest{Channel: r.ch, FromSequence: r.next, MaxRecords: retainedReadBatch, WaitMs: waitMs})
	if err != nil {
		return nil, fmt.Errorf("read retained topic %s: %w", r.topic, err)
	}
	out := resp.GetRecords()[:0]
	for _, rec := range resp.GetRecords() {
		r.next = max(r.next, rec.GetSequence()+1)
		if !rec.GetControl() && rec.GetKey() != nil {
			out = append(out, rec)
		}
	}
	r.next = max(r.next, resp.GetNextSequence())
	return out, nil
}

// follow applies the records appended after load (by this replica or another one)
// to the broker's retained set until ctx ends. The topic's order decides: a message
// this replica retained is set at once and set again when its record is read back.
func (r *retainedLog) follow(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		recs, err := r.read(ctx, 1000)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.log.Warn("following the retained topic failed; retrying", zap.Error(err))
			if !retry(ctx, &backoff) {
				return
			}
			continue
		}
		backoff = 100 * time.Millisecond
		for _, rec := range recs {
			// Not through the hooks: the record is in the topic already.
			r.l.srv.Topics.RetainMessage(packet(rec))
		}
	}
}

// append stores pk's record, synced, before the publisher's acknowledgement.
func (r *retainedLog) append(cl *mqtt.Client, pk packets.Packet) error {
	ctx, cancel := context.WithTimeout(r.l.b.ctx, r.l.b.cfg.StoreTimeout)
	defer cancel()
	return r.l.b.store.append(ctx, r.topic, 0, []*storagev1.AppendRecord{r.record(cl, pk)}, nil)
}

// retainedHook keeps the broker's retained messages in the retained topic.
type retainedHook struct {
	mqtt.HookBase
	r *retainedLog
}

func (h *retainedHook) ID() string { return "tributary-retained" }

func (h *retainedHook) Provides(b byte) bool {
	return b == mqtt.OnRetainMessage || b == mqtt.StoredRetainedMessages
}

// OnRetainMessage appends a retained PUBLISH, or a clear, to the topic; the library
// acknowledges the PUBLISH after it. A failed append is logged: the message stays
// retained in this process only.
func (h *retainedHook) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, _ int64) {
	if err := h.r.append(cl, pk); err != nil {
		h.r.log.Error("retained message not stored; it is retained in this process only", zap.String("topic", pk.TopicName), zap.Error(err))
	}
}

// StoredRetainedMessages reads the topic back as the broker starts (before it accepts
// a client), retrying until storage-core answers or the bridge stops, then starts
// following it.
func (h *retainedHook) StoredRetainedMessages() ([]storage.Message, error) {
	ctx := h.r.l.b.ctx
	backoff := 100 * time.Millisecond
	for {
		pks, err := h.r.load(ctx)
		if err == nil {
			// Set here rather than given back: the library would only do the same.
			for _, pk := range pks {
				h.r.l.srv.Topics.RetainMessage(pk)
			}
			go h.r.follow(ctx)
			return nil, nil
		}
		h.r.log.Warn("retained topic not read back yet; the listener waits for it", zap.Error(err))
		if !retry(ctx, &backoff) {
			return nil, err
		}
	}
}
