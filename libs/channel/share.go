package channel

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// KafkaSharePrefix starts the name of every share-partition queue (KIP-932): the
// state of share group G for topic T partition p is the queue
// "_KAFKA_share.<hex(G)>.<T>" (partition 0) or "_KAFKA_share.<hex(G)>.<T>~<p>",
// bound to the log KafkaPartition(T, p). The name is in the reserved "_" namespace:
// only storage-core's ShareService builds and uses it, no external caller can read or
// change the state through QueueService. The group id is hex-encoded: Kafka group
// ids may hold any character, channel names may not.
const KafkaSharePrefix = "_KAFKA_share."

// MaxShareGroupIDLen is the longest group id a share partition can be named for, in
// bytes: the name (prefix, hex group, ".", the longest topic and "~255") fits
// MaxNameLen.
const MaxShareGroupIDLen = (MaxNameLen - len(KafkaSharePrefix) - 1 - MaxTopicNameLen - 4) / 2

// KafkaSharePartition returns the queue holding share group group's state for Kafka
// topic partition (topic, partition). Errors wrap ErrInvalidName (empty group, or one
// longer than MaxShareGroupIDLen), ErrInvalidTopic or ErrInvalidPartition.
func KafkaSharePartition(group, topic string, partition int32) (string, error) {
	if group == "" || len(group) > MaxShareGroupIDLen {
		return "", fmt.Errorf("%w: share group id of %d bytes; 1..%d allowed", ErrInvalidName, len(group), MaxShareGroupIDLen)
	}
	if err := ValidateKafkaTopic(topic); err != nil {
		return "", err
	}
	if partition < 0 || partition >= MaxPartitions {
		return "", fmt.Errorf("%w: %d", ErrInvalidPartition, partition)
	}
	return KafkaSharePrefix + hex.EncodeToString([]byte(group)) + "." + KafkaPartition(topic, partition)[len(kafkaPrefix):], nil
}

// KafkaShareGroupPrefix is the name prefix of every share-partition queue of group
// (to list them).
func KafkaShareGroupPrefix(group string) string {
	return KafkaSharePrefix + hex.EncodeToString([]byte(group)) + "."
}

// ParseKafkaSharePartition splits a share-partition queue name into group, topic and
// partition; ok is false when name is not one.
func ParseKafkaSharePartition(name string) (group, topic string, partition int32, ok bool) {
	rest, found := strings.CutPrefix(name, KafkaSharePrefix)
	if !found {
		return "", "", 0, false
	}
	hg, part, found := strings.Cut(rest, ".")
	if !found || hg == "" {
		return "", "", 0, false
	}
	g, err := hex.DecodeString(hg)
	if err != nil || hex.EncodeToString(g) != hg {
		return "", "", 0, false
	}
	topic, partition, ok = ParseKafka(kafkaPrefix + part)
	if !ok {
		return "", "", 0, false
	}
	return string(g), topic, partition, true
}

// ValidateStored checks a name storage-core may hold: any name Validate accepts,
// and the system's share-partition queues (KafkaSharePartition), which only
// storage-core creates. External callers are checked with Validate.
func ValidateStored(name string) error {
	if _, _, _, ok := ParseKafkaSharePartition(name); ok {
		return nil
	}
	return Validate(name)
}
