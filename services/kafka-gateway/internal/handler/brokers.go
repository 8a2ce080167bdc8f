package handler

// The Kafka identity of the cluster of kafka-gateway replicas, shared by the API files
// that describe it (Metadata, DescribeCluster, DescribeConfigs, ...).

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// KafkaClusterID derives the Kafka cluster id (22 characters of URL-safe base64, like a
// Kafka-generated id) from the Tributary cluster id, so every replica reports the same.
func KafkaClusterID(clusterID string) string {
	sum := sha256.Sum256([]byte("tributary/" + clusterID))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

// Kafka ConfigResourceType values (DescribeConfigs, IncrementalAlterConfigs).
const (
	resourceTopic  = kmsg.ConfigResourceType(2)
	resourceBroker = kmsg.ConfigResourceType(4)
	resourceGroup  = kmsg.ConfigResourceType(32)
)
