// Package pubsubspec derives the storage-core settings of Pub/Sub resources from the
// specs the pubsub-gateway keeps in the coordinator's registry (serialized
// google.pubsub.v1.Topic and Subscription, as the gateway normalized them): the config
// of a topic's log gcp.<topic> and the config of a subscription's queue
// gcp.sub.<subscription>. The gateway builds its create and update requests with it,
// and the coordinator rebuilds from the stored specs the channels storage-core lost, so
// both always agree.
package pubsubspec

import (
	"strings"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Reserved headers on gcp.<topic> records: visible to native readers, stripped for
// Pub/Sub clients (every header starting with "_" is).
const (
	HeaderMessageID   = "_pubsub_message_id"
	HeaderPublishTime = "_pubsub_publish_time"
	HeaderOrderingKey = "_pubsub_ordering_key"
	// HeaderDeadLetterSourceTime carries the source record's timestamp (decimal ms) on
	// a dead-lettered record; delivery turns it into
	// CloudPubSubDeadLetterSourceTopicPublishTime.
	HeaderDeadLetterSourceTime = "_pubsub_dl_source_time"
)

// Attributes of a dead-lettered message (Google's "Dead-letter topics").
const (
	AttrDeadLetterSourceSubscription = "CloudPubSubDeadLetterSourceSubscription"
	AttrDeadLetterSourceProject      = "CloudPubSubDeadLetterSourceSubscriptionProject"
	AttrDeadLetterSourceTime         = "CloudPubSubDeadLetterSourceTopicPublishTime"
	AttrDeadLetterSourceCount        = "CloudPubSubDeadLetterSourceDeliveryCount"
)

// MaxLogBatchBytes is the largest append a topic's log takes: a whole 10 MB publish
// plus the reserved headers (storage-core's default is Kafka's 1 MB).
const MaxLogBatchBytes = 16 << 20

// TopicChannelConfig is the config of a topic's log: retention from the topic's
// message_retention_duration (storage-core's default when unset), and appends large
// enough for any valid publish. t must be valid (the gateway checks it first).
func TopicChannelConfig(t *pubsubpb.Topic) *storagev1.ChannelConfig {
	cfg := &storagev1.ChannelConfig{MaxMessageBytes: MaxLogBatchBytes}
	if d := t.GetMessageRetentionDuration(); d != nil {
		cfg.RetentionMs = d.AsDuration().Milliseconds()
	}
	return cfg
}

// QueueConfig is the config of the queue of subscription id in project, from its
// normalized spec s: ack deadline, retention, retain-acked, exactly-once, ordering (by
// HeaderOrderingKey), dead-letter policy (to the dead-letter topic's log, with Google's
// source attributes) and retry policy.
func QueueConfig(s *pubsubpb.Subscription, project, id string) *storagev1.QueueConfig {
	c := &storagev1.QueueConfig{
		AckDeadlineMs:      s.GetAckDeadlineSeconds() * 1000,
		MessageRetentionMs: s.GetMessageRetentionDuration().AsDuration().Milliseconds(),
		RetainAcked:        s.GetRetainAckedMessages(),
		ExactlyOnce:        s.GetEnableExactlyOnceDelivery(),
	}
	if s.GetEnableMessageOrdering() {
		c.OrderingKeyHeader = HeaderOrderingKey
	}
	if p := s.GetDeadLetterPolicy(); p != nil {
		c.DeadLetter = &storagev1.DeadLetterPolicy{
			Channel:             channel.PubSubTopic(ID(p.GetDeadLetterTopic())),
			MaxDeliveryAttempts: p.GetMaxDeliveryAttempts(),
			Headers: []*storagev1.Header{
				{Key: AttrDeadLetterSourceSubscription, Value: []byte(id)},
				{Key: AttrDeadLetterSourceProject, Value: []byte(project)},
			},
			DeliveryCountHeader:   AttrDeadLetterSourceCount,
			SourceTimestampHeader: HeaderDeadLetterSourceTime,
			// The dead-lettered message is a new message of the dead-letter topic: its id
			// and publish time come from its record there.
			DropHeaders: []string{HeaderMessageID, HeaderPublishTime, AttrDeadLetterSourceSubscription, AttrDeadLetterSourceProject, AttrDeadLetterSourceCount, HeaderDeadLetterSourceTime},
		}
	}
	if p := s.GetRetryPolicy(); p != nil {
		c.Retry = &storagev1.RetryPolicy{
			MinBackoffMs: p.GetMinimumBackoff().AsDuration().Milliseconds(),
			MaxBackoffMs: p.GetMaximumBackoff().AsDuration().Milliseconds(),
		}
	}
	return c
}

// Project returns P of a resource name projects/P/<collection>/ID ("" for any other
// shape).
func Project(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" {
		return ""
	}
	return parts[1]
}

// ID returns ID of a resource name projects/P/<collection>/ID ("" for any other
// shape).
func ID(name string) string {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" {
		return ""
	}
	return parts[3]
}
