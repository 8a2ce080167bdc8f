package channel

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// KafkaSharePrefix starts the name of every share-partition queue (KIP-932): the
// state of share group G for topic T partition p is the queue
// "_KAFKA_share.<key(G)>.<T>" (partition 0) or "_KAFKA_share.<key(G)>.<T>~<p>",
// bound to the log KafkaPartition(T, p). The name is in the reserved "_" namespace:
// only storage-core's ShareService builds and uses it, no external caller can read or
// change the state through QueueService. key(G) is KafkaShareGroupKey.
const KafkaSharePrefix = "_KAFKA_share."

// maxHexShareGroupLen is the longest group id whose key is its hex encoding, in
// bytes: the name (prefix, hex group, ".", the longest topic and "~255") fits
// MaxNameLen.
const maxHexShareGroupLen = (MaxNameLen - len(KafkaSharePrefix) - 1 - MaxTopicNameLen - 4) / 2

// shareHashKeyPrefix starts the key of a group id longer than maxHexShareGroupLen.
// 's' and '-' are not hex digits, so no hex key begins like it.
const shareHashKeyPrefix = "sha256-"

// KafkaShareGroupKey is the part of a share-partition queue's name that stands for
// share group group: the hex encoding of the id (Kafka group ids may hold any byte,
// channel names may not) when it has at most 122 bytes, else "sha256-" and the hex
// SHA-256 of the id, so that any id Kafka accepts (a non-empty string16, up to 32767
// bytes; Kafka sets no other bound) names a queue within MaxNameLen. Two ids share
// a key only if SHA-256 collides; a hashed key never equals a hex one.
func KafkaShareGroupKey(group string) string {
	if len(group) <= maxHexShareGroupLen {
		return hex.EncodeToString([]byte(group))
	}
	sum := sha256.Sum256([]byte(group))
	return shareHashKeyPrefix + hex.EncodeToString(sum[:])
}

// KafkaSharePartition returns the queue holding share group group's state for Kafka
// topic partition (topic, partition). Errors wrap ErrInvalidName (empty group),
// ErrInvalidTopic or ErrInvalidPartition.
func KafkaSharePartition(group, topic string, partition int32) (string, error) {
	if group == "" {
		return "", fmt.Errorf("%w: empty share group id", ErrInvalidName)
	}
	if err := ValidateKafkaTopic(topic); err != nil {
		return "", err
	}
	if partition < 0 || partition >= MaxPartitions {
		return "", fmt.Errorf("%w: %d", ErrInvalidPartition, partition)
	}
	return KafkaShareGroupPrefix(group) + KafkaPartition(topic, partition)[len(kafkaPrefix):], nil
}

// KafkaShareGroupPrefix is the name prefix of every share-partition queue of group
// (to list them).
func KafkaShareGroupPrefix(group string) string {
	return KafkaSharePrefix + KafkaShareGroupKey(group) + "."
}

// ParseKafkaSharePartition splits a share-partition queue name into the group's key
// (KafkaShareGroupKey), topic and partition; ok is false when name is not one.
func ParseKafkaSharePartition(name string) (groupKey, topic string, partition int32, ok bool) {
	rest, found := strings.CutPrefix(name, KafkaSharePrefix)
	if !found {
		return "", "", 0, false
	}
	key, part, found := strings.Cut(rest, ".")
	if !found || !validShareGroupKey(key) {
		return "", "", 0, false
	}
	topic, partition, ok = ParseKafka(kafkaPrefix + part)
	if !ok {
		return "", "", 0, false
	}
	return key, topic, partition, true
}

// validShareGroupKey reports whether key is one KafkaShareGroupKey returns for some
// group id.
func validShareGroupKey(key string) bool {
	if h, hashed := strings.CutPrefix(key, shareHashKeyPrefix); hashed {
		return len(h) == 2*sha256.Size && lowerHex(h)
	}
	return key != "" && len(key) <= 2*maxHexShareGroupLen && len(key)%2 == 0 && lowerHex(key)
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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
