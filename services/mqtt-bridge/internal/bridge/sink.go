package bridge

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// discoverEvery is how often a kafka-to-mqtt mapping looks for new topics and
// partitions.
const discoverEvery = 5 * time.Second

// publisher is the MQTT side of a kafka-to-mqtt mapping. publish returns once the
// MQTT side took the message (PUBACK for QoS 1, PUBCOMP for QoS 2), with its reason.
type publisher interface {
	publish(ctx context.Context, m mapping.Message) (byte, error)
}

// sinkRunner consumes the Kafka topics of one kafka-to-mqtt mapping, one goroutine
// per partition, committing each partition's offset in the mapping's consumer group
// (as a simple consumer: generation -1, no member id) after the MQTT side took the
// records before it.
type sinkRunner struct {
	b    *Bridge
	s    *mapping.Sink
	pub  publisher
	log  *zap.Logger
	wg   sync.WaitGroup
	seen map[string]bool
	// discovered is set after the first successful discovery: a topic or partition
	// that appears later is new, and is read from its start (nothing in it predates the
	// mapping), whatever start-at says.
	discovered bool
}

func (r *sinkRunner) run(ctx context.Context) {
	defer r.wg.Wait()
	r.seen = map[string]bool{}
	t := time.NewTicker(discoverEvery)
	defer t.Stop()
	for {
		if err := r.discover(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("topic discovery failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *sinkRunner) discover(ctx context.Context) error {
	req := &coordinatorv1.GetTopicsRequest{}
	if r.s.Cfg.KafkaTopicPattern != "" {
		req.All = true
	} else {
		req.Names = r.s.Cfg.KafkaTopics
	}
	cctx, cancel := context.WithTimeout(ctx, r.b.cfg.StoreTimeout)
	defer cancel()
	resp, err := r.b.coord.GetTopics(cctx, req)
	if err != nil {
		return err
	}
	fromStart := r.discovered
	r.discovered = true
	for _, t := range resp.GetTopics() {
		if t.GetErrorCode() != 0 || !r.s.Reads(t.GetName()) {
			continue
		}
		for p := int32(0); p < t.GetPartitions(); p++ {
			ch := channel.KafkaPartition(t.GetName(), p)
			if r.seen[ch] {
				continue
			}
			r.seen[ch] = true
			r.wg.Add(1)
			go func(topic string, p int32) {
				defer r.wg.Done()
				r.partition(ctx, topic, p, fromStart)
			}(t.GetName(), p)
		}
	}
	return nil
}

// retry waits the backoff (doubling to 5 s); false when ctx ended.
func retry(ctx context.Context, backoff *time.Duration) bool {
	select {
	case <-time.After(*backoff):
	case <-ctx.Done():
		return false
	}
	*backoff = min(*backoff*2, 5*time.Second)
	return true
}

func (r *sinkRunner) partition(ctx context.Context, topic string, p int32, fromStart bool) {
	ch := channel.KafkaPartition(topic, p)
	log := r.log.With(zap.String("channel", ch))
	id := r.s.Cfg.ID
	backoff := 100 * time.Millisecond
	var next int64
	for {
		n, err := r.start(ctx, topic, p, ch, fromStart)
		if err == nil {
			next = n
			break
		}
		log.Warn("start position unknown; retrying", zap.Error(err))
		if !retry(ctx, &backoff) {
			return
		}
	}
	log.Info("consuming", zap.Int64("from_sequence", next), zap.String("group", r.s.Cfg.ConsumerGroup))
	// gone is set while the topic does not exist (deleted): once it exists again it is
	// a new log, read from its start (the old position means nothing in it).
	gone := false
	for ctx.Err() == nil {
		if gone {
			gc, err := r.b.storage.GetChannel(ctx, &storagev1.GetChannelRequest{Name: ch})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				if !retry(ctx, &backoff) {
					return
				}
				continue
			}
			gone = false
			n := max(gc.GetChannel().GetLogStartSequence(), 1)
			log.Warn("topic created again; reading the new log from its start", zap.Int64("from", next), zap.Int64("to", n))
			next = n
			r.commitOrWarn(ctx, log, topic, p, channel.SequenceToOffset(next))
		}
		resp, err := r.b.storage.Read(ctx, &storagev1.ReadRequest{Channel: ch, FromSequence: next, MaxRecords: 500, WaitMs: 1000})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			switch status.Code(err) {
			case codes.NotFound:
				if !gone {
					log.Warn("topic deleted; waiting for it to be created again", zap.Error(err))
				}
				gone = true
				if !retry(ctx, &backoff) {
					return
				}
				continue
			case codes.OutOfRange:
				if gc, err := r.b.storage.GetChannel(ctx, &storagev1.GetChannelRequest{Name: ch}); err == nil {
					start, end := max(gc.GetChannel().GetLogStartSequence(), 1), gc.GetChannel().GetHighWatermark()+1
					switch {
					case next < start:
						log.Warn("records deleted before the committed offset; skipping to the log start", zap.Int64("from", next), zap.Int64("to", start))
						next = start
						continue
					case next > end:
						// Past the end: the topic was deleted and created again between
						// two reads (or the group's offset belongs to an older topic).
						log.Warn("position past the end of the log (topic created again); reading from its start", zap.Int64("from", next), zap.Int64("to", start))
						next = start
						r.commitOrWarn(ctx, log, topic, p, channel.SequenceToOffset(next))
						continue
					}
				}
			}
			log.Warn("read failed; retrying", zap.Error(err))
			if !retry(ctx, &backoff) {
				return
			}
			continue
		}
		backoff = 100 * time.Millisecond
		if len(resp.GetRecords()) == 0 {
			continue
		}
		for _, rec := range resp.GetRecords() {
			if rec.GetControl() {
				continue
			}
			r.b.m.polled.WithLabelValues(id).Inc()
			msgs, invalid := r.s.Build(topic, rec)
			if invalid > 0 {
				r.b.m.invalid.WithLabelValues(id).Add(float64(invalid))
			}
			for _, m := range msgs {
				if !r.send(ctx, log, m) {
					return
				}
			}
		}
		last := resp.GetRecords()[len(resp.GetRecords())-1].GetSequence()
		next = max(resp.GetNextSequence(), last+1)
		if err := r.commit(ctx, topic, p, channel.SequenceToOffset(next)); err != nil && ctx.Err() == nil {
			log.Warn("offset commit failed (records may be published again after a restart)", zap.Error(err))
		}
	}
}

func (r *sinkRunner) commitOrWarn(ctx context.Context, log *zap.Logger, topic string, p int32, offset int64) {
	if err := r.commit(ctx, topic, p, offset); err != nil && ctx.Err() == nil {
		log.Warn("offset commit failed", zap.Error(err))
	}
}

// send publishes m until the MQTT side takes it; a refusal (reason ≥ 0x80) is counted
// and the message skipped. false when ctx ended.
func (r *sinkRunner) send(ctx context.Context, log *zap.Logger, m mapping.Message) bool {
	id := r.s.Cfg.ID
	backoff := 100 * time.Millisecond
	for {
		rc, err := r.pub.publish(ctx, m)
		if err == nil {
			if rc >= 0x80 {
				r.b.m.refused.WithLabelValues(id).Inc()
				log.Warn("MQTT side refused a message; skipped", zap.String("topic", m.Topic), zap.Uint8("reason", rc))
			} else {
				r.b.m.published.WithLabelValues(id).Inc()
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("publish failed; retrying", zap.String("topic", m.Topic), zap.Error(err))
		if !retry(ctx, &backoff) {
			return false
		}
	}
}

// start is the sequence to read first: the group's committed offset + 1, or, for a
// new group, the end (latest) or the log start (earliest, or fromStart: a partition
// that appeared while the mapping ran), which is committed at once so that a restart
// before the first record resumes there.
func (r *sinkRunner) start(ctx context.Context, topic string, p int32, ch string, fromStart bool) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, r.b.cfg.StoreTimeout)
	defer cancel()
	resp, err := r.b.groups.OffsetFetch(cctx, &coordinatorv1.OffsetFetchRequest{Groups: []*coordinatorv1.OffsetFetchGroup{{
		GroupId: r.s.Cfg.ConsumerGroup,
		Topics:  []*coordinatorv1.OffsetFetchTopic{{Name: topic, Partitions: []int32{p}}},
	}}})
	if err != nil {
		return 0, err
	}
	for _, g := range resp.GetGroups() {
		if g.GetErrorCode() != 0 {
			return 0, fmt.Errorf("offset fetch: kafka error %d", g.GetErrorCode())
		}
		for _, t := range g.GetTopics() {
			for _, fp := range t.GetPartitions() {
				if fp.GetPartition() == p && fp.GetErrorCode() == 0 && fp.GetCommittedOffset() >= 0 {
					return channel.OffsetToSequence(fp.GetCommittedOffset()), nil
				}
			}
		}
	}
	gc, err := r.b.storage.GetChannel(cctx, &storagev1.GetChannelRequest{Name: ch})
	if err != nil {
		return 0, err
	}
	next := gc.GetChannel().GetHighWatermark() + 1
	if r.s.Cfg.StartAt == "earliest" || fromStart {
		next = max(gc.GetChannel().GetLogStartSequence(), 1)
	}
	if err := r.commit(cctx, topic, p, channel.SequenceToOffset(next)); err != nil {
		return 0, err
	}
	return next, nil
}

// commit stores offset (the Kafka offset of the next record to consume).
func (r *sinkRunner) commit(ctx context.Context, topic string, p int32, offset int64) error {
	cctx, cancel := context.WithTimeout(ctx, r.b.cfg.StoreTimeout)
	defer cancel()
	resp, err := r.b.groups.OffsetCommit(cctx, &coordinatorv1.OffsetCommitRequest{
		GroupId: r.s.Cfg.ConsumerGroup, GenerationId: -1, MemberId: "",
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: topic, Partitions: []*coordinatorv1.OffsetCommitPartition{{
			Partition: p, CommittedOffset: offset, CommittedLeaderEpoch: -1,
		}}}},
	})
	if err != nil {
		return err
	}
	for _, t := range resp.GetTopics() {
		for _, pr := range t.GetPartitions() {
			if pr.GetErrorCode() != 0 {
				return fmt.Errorf("offset commit %s/%d: kafka error %d", topic, p, pr.GetErrorCode())
			}
		}
	}
	return nil
}
