package channel

import "crypto/sha256"

// KafkaInternalTopic is a Kafka internal topic as Kafka lists it in Metadata
// (is_internal true). Ours hold no log: Kafka's own records there (offset commits,
// transaction state, share-group state) live in the coordinator's Postgres and in
// storage-core's queues. Clients may not create, delete or produce to them.
type KafkaInternalTopic struct {
	Name string
	// Partitions is Kafka's default (offsets.topic.num.partitions,
	// transaction.state.log.num.partitions, share.coordinator.state.topic.num.partitions:
	// 50).
	Partitions int32
	// Configs are the topic configs Kafka creates it with (DescribeConfigs shows them
	// set on the topic): GroupCoordinator.groupMetadataTopicConfigs,
	// ShareCoordinatorService.shareGroupStateTopicConfigs and
	// TransactionStateManager.transactionTopicConfigs at their defaults
	// (offsets.topic.segment.bytes, share.coordinator.state.topic.segment.bytes,
	// transaction.state.log.segment.bytes: 100 MiB), without the transaction log's
	// min.insync.replicas, which means nothing here.
	Configs map[string]string
}

// KafkaInternalTopics are the topics Kafka 4's Topic.isInternal names:
// __consumer_offsets, __transaction_state and KIP-932's __share_group_state (the share
// groups served here are KIP-932's, so a client may expect it, and Kafka refuses
// appends to it as to the other two).
var KafkaInternalTopics = []KafkaInternalTopic{
	{Name: "__consumer_offsets", Partitions: 50, Configs: map[string]string{
		"cleanup.policy": "compact", "compression.type": "producer", "segment.bytes": "104857600",
	}},
	{Name: "__share_group_state", Partitions: 50, Configs: map[string]string{
		"cleanup.policy": "delete", "compression.type": "producer", "segment.bytes": "104857600",
	}},
	{Name: "__transaction_state", Partitions: 50, Configs: map[string]string{
		"cleanup.policy": "compact", "compression.type": "uncompressed", "segment.bytes": "104857600",
		"unclean.leader.election.enable": "false",
	}},
}

// KafkaInternal returns the internal topic named name.
func KafkaInternal(name string) (KafkaInternalTopic, bool) {
	for _, t := range KafkaInternalTopics {
		if t.Name == name {
			return t, true
		}
	}
	return KafkaInternalTopic{}, false
}

// KafkaInternalTopicID is the topic id of internal topic name in cluster clusterID
// (the --cluster-id every service gets): a UUID v4 layout of SHA-256 over both, so
// kafka-gateway (Metadata) and the coordinator (KIP-848 regex subscriptions) agree on
// it without storing it.
func KafkaInternalTopicID(clusterID, name string) [16]byte {
	sum := sha256.Sum256([]byte("tributary kafka internal topic\x00" + clusterID + "\x00" + name))
	var id [16]byte
	copy(id[:], sum[:16])
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}
