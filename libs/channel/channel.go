// Package channel owns the channel naming grammar (DESIGN section 2). Every service builds
// and parses channel names here and nowhere else. It also names the one numeric relation
// between a log and Kafka: offset = sequence - 1 (offset.go).
//
//	Kafka topic t, partition 0          log   kafka.t
//	Kafka topic t, partition p >= 1     log   kafka.t~p
//	Pub/Sub topic projects/P/topics/t   log   gcp.t
//	Pub/Sub subscription .../s          queue gcp.sub.s
//
// Names starting with "_" are reserved for the system and refused to every external
// caller. "~" is reserved as the partition separator.
package channel

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Limits from Apache Kafka (Topic.java) and DESIGN section 2.
const (
	// MaxTopicNameLen is Kafka's limit on topic names, in characters.
	MaxTopicNameLen = 249
	// MaxPartitions is the largest partition count a topic may have.
	MaxPartitions = 256
	// MaxNameLen is the longest channel name, in bytes.
	MaxNameLen = 512

	kafkaPrefix = "kafka."
	gcpPrefix   = "gcp."
	gcpSubInfix = "sub."
	partSep     = "~"
)

// Errors returned by the validators; wrap-compatible with errors.Is.
var (
	// ErrInvalidName is returned for a name outside the grammar.
	ErrInvalidName = errors.New("invalid channel name")
	// ErrReserved is returned for a name in the system's reserved "_" namespace.
	ErrReserved = errors.New("reserved channel name")
	// ErrInvalidTopic is returned for a Kafka topic name Kafka would refuse, or one
	// containing "~".
	ErrInvalidTopic = errors.New("invalid topic name")
	// ErrInvalidPartition is returned for a partition outside 0..MaxPartitions-1.
	ErrInvalidPartition = errors.New("invalid partition")
	// ErrInvalidPubSubID is returned for a Pub/Sub topic or subscription id Google
	// would refuse, or a topic id starting with "sub.".
	ErrInvalidPubSubID = errors.New("invalid resource id")
)

// Pub/Sub resource id limits (Google's resource names: [A-Za-z][\w-.~+%]{2,254}).
const (
	MinPubSubIDLen = 3
	MaxPubSubIDLen = 255
)

// ValidateKafkaTopic checks a Kafka topic name: [a-zA-Z0-9._-], 1..249 characters, not
// "." or "..". "~" is refused (it separates partitions in channel names). Errors wrap
// ErrInvalidTopic and map to Kafka INVALID_TOPIC_EXCEPTION (17).
func ValidateKafkaTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: topic name is empty", ErrInvalidTopic)
	case topic == "." || topic == "..":
		return fmt.Errorf("%w: topic name cannot be %q", ErrInvalidTopic, topic)
	case len(topic) > MaxTopicNameLen:
		return fmt.Errorf("%w: topic name is %d characters, longer than %d", ErrInvalidTopic, len(topic), MaxTopicNameLen)
	}
	for i := 0; i < len(topic); i++ {
		if !topicChar(topic[i]) {
			return fmt.Errorf("%w: topic name %q contains %q; only [a-zA-Z0-9._-] are allowed", ErrInvalidTopic, topic, topic[i])
		}
	}
	return nil
}

func topicChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// KafkaPrefix starts the name of every Kafka log channel (KafkaPartition): list the
// channels under it to find every Kafka partition's log.
const KafkaPrefix = kafkaPrefix

// KafkaPartition returns the log channel for a Kafka topic partition. The topic must
// already be valid (ValidateKafkaTopic) and partition in 0..MaxPartitions-1.
func KafkaPartition(topic string, partition int32) string {
	if partition == 0 {
		return kafkaPrefix + topic
	}
	return kafkaPrefix + topic + partSep + strconv.FormatInt(int64(partition), 10)
}

// ParseKafka splits a Kafka log channel name into topic and partition. ok is false
// when name is not a well-formed Kafka channel.
func ParseKafka(name string) (topic string, partition int32, ok bool) {
	rest, found := strings.CutPrefix(name, kafkaPrefix)
	if !found {
		return "", 0, false
	}
	topic = rest
	if i := strings.LastIndex(rest, partSep); i >= 0 {
		topic = rest[:i]
		p, err := strconv.ParseInt(rest[i+1:], 10, 32)
		if err != nil || p < 1 || p >= MaxPartitions || strconv.FormatInt(p, 10) != rest[i+1:] {
			return "", 0, false
		}
		partition = int32(p)
	}
	if ValidateKafkaTopic(topic) != nil {
		return "", 0, false
	}
	return topic, partition, true
}

// ValidatePubSubID checks a Pub/Sub resource id (topic, subscription, snapshot): 3..255
// characters of [A-Za-z0-9_.~+%-], starting with a letter, not starting with "goog".
// Errors wrap ErrInvalidPubSubID.
func ValidatePubSubID(id string) error {
	switch {
	case len(id) < MinPubSubIDLen || len(id) > MaxPubSubIDLen:
		return fmt.Errorf("%w: %q must be %d..%d characters long", ErrInvalidPubSubID, id, MinPubSubIDLen, MaxPubSubIDLen)
	case !(id[0] >= 'a' && id[0] <= 'z' || id[0] >= 'A' && id[0] <= 'Z'):
		return fmt.Errorf("%w: %q must start with a letter", ErrInvalidPubSubID, id)
	case strings.HasPrefix(strings.ToLower(id), "goog"):
		return fmt.Errorf("%w: %q must not start with \"goog\"", ErrInvalidPubSubID, id)
	}
	for i := 0; i < len(id); i++ {
		if !pubsubChar(id[i]) {
			return fmt.Errorf("%w: %q contains %q; only [A-Za-z0-9_.~+%%-] are allowed", ErrInvalidPubSubID, id, id[i])
		}
	}
	return nil
}

// ValidatePubSubTopicID checks a Pub/Sub topic id: ValidatePubSubID, and not starting
// with "sub." (gcp.sub.* names subscription queues).
func ValidatePubSubTopicID(id string) error {
	if err := ValidatePubSubID(id); err != nil {
		return err
	}
	if strings.HasPrefix(id, gcpSubInfix) {
		return fmt.Errorf("%w: topic id %q must not start with %q", ErrInvalidPubSubID, id, gcpSubInfix)
	}
	return nil
}

func pubsubChar(c byte) bool { return topicChar(c) || c == '~' || c == '+' || c == '%' }

// ParsePubSub splits a gcp. channel name: the topic id of a log gcp.t, or the
// subscription id of a queue gcp.sub.s (sub true). ok is false for any other name.
func ParsePubSub(name string) (id string, sub bool, ok bool) {
	rest, found := strings.CutPrefix(name, gcpPrefix)
	if !found {
		return "", false, false
	}
	if s, isSub := strings.CutPrefix(rest, gcpSubInfix); isSub {
		return s, true, ValidatePubSubID(s) == nil
	}
	return rest, false, ValidatePubSubTopicID(rest) == nil
}

// PubSubPrefix starts the name of every Pub/Sub channel: topic logs (PubSubTopic) and
// subscription queues (PubSubSubscription).
const PubSubPrefix = gcpPrefix

// PubSubTopic returns the log channel for a Pub/Sub topic id (the last segment of
// projects/P/topics/ID).
func PubSubTopic(topicID string) string { return gcpPrefix + topicID }

// PubSubSubscription returns the queue channel for a Pub/Sub subscription id.
func PubSubSubscription(subID string) string { return gcpPrefix + gcpSubInfix + subID }

// IsReserved reports whether name lies in the system's "_" namespace.
func IsReserved(name string) bool { return strings.HasPrefix(name, "_") }

// Validate checks a channel name as any external caller may use it: 1..MaxNameLen bytes
// of [a-zA-Z0-9._~-] (under gcp. also "+" and "%", which Pub/Sub ids may hold), not
// reserved, and, under the kafka. and gcp. namespaces, well formed for that protocol. Errors wrap ErrReserved or ErrInvalidName.
func Validate(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if IsReserved(name) {
		return fmt.Errorf("%w: %q: names starting with \"_\" belong to the system", ErrReserved, name)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidName, len(name), MaxNameLen)
	}
	gcp := strings.HasPrefix(name, gcpPrefix)
	for i := 0; i < len(name); i++ {
		if c := name[i]; !topicChar(c) && c != '~' && !(gcp && (c == '+' || c == '%')) {
			return fmt.Errorf("%w: %q contains %q; only [a-zA-Z0-9._~-] are allowed", ErrInvalidName, name, c)
		}
	}
	if name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if strings.HasPrefix(name, kafkaPrefix) {
		if _, _, ok := ParseKafka(name); !ok {
			return fmt.Errorf("%w: %q is not kafka.<topic> or kafka.<topic>~<partition 1..255>", ErrInvalidName, name)
		}
	}
	if rest, ok := strings.CutPrefix(name, gcpPrefix); ok && (rest == "" || rest == gcpSubInfix) {
		return fmt.Errorf("%w: %q has no id", ErrInvalidName, name)
	}
	return nil
}
