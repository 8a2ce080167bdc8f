// Package natsx names the NATS subjects Tributary's services publish and subscribe to,
// and the JetStream KV bucket of the sweep locks; no service spells one by hand. NATS carries wake-ups, announcements and sweep
// coordination, never data (DESIGN §1, §4). Every subject starts with
// "tributary.<cluster-id>.", so clusters sharing a NATS server never hear each other.
package natsx

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

func clusterPrefix(clusterID string) string { return "tributary." + clusterID + "." }

// TopicsChangedSubject is the subject the coordinator announces a Kafka topic change on
// (create, delete, partitions added, configs altered): "tributary.<cluster-id>.topics.changed",
// with the topic name as payload. kafka-gateway replicas drop that topic's cached
// metadata when it arrives.
func TopicsChangedSubject(clusterID string) string {
	return clusterPrefix(clusterID) + "topics.changed"
}

// AclsChangedSubject is the subject the coordinator announces a change of the Kafka
// ACLs on (CreateAcls, DeleteAcls): "tributary.<cluster-id>.acls.changed", empty
// payload. kafka-gateway replicas reload their ACL cache when it arrives.
func AclsChangedSubject(clusterID string) string {
	return clusterPrefix(clusterID) + "acls.changed"
}

// CredentialsChangedSubject is the subject the coordinator announces a change of a
// Kafka user's SCRAM credentials on (AlterUserScramCredentials, KIP-554):
// "tributary.<cluster-id>.credentials.changed", with the user name as payload.
// kafka-gateway replicas drop that user's cached credentials when it arrives.
func CredentialsChangedSubject(clusterID string) string {
	return clusterPrefix(clusterID) + "credentials.changed"
}

// MqttUsersChangedSubject is the subject the coordinator announces a change of an MQTT
// listener login on (MqttUserService put or delete): "tributary.<cluster-id>.mqtt.users.changed",
// with the user name as payload. mqtt-bridge replicas drop that user's cached login
// when it arrives.
func MqttUsersChangedSubject(clusterID string) string {
	return clusterPrefix(clusterID) + "mqtt.users.changed"
}

// BrokersSubject is the subject kafka-gateway replicas announce themselves on, once a
// second: "tributary.<cluster-id>.kafka.brokers", payload JSON {node_id, host, port,
// rack, listeners}.
func BrokersSubject(clusterID string) string {
	return clusterPrefix(clusterID) + "kafka.brokers"
}

// GroupChangedPrefix is the prefix of the subjects announcing that a Kafka group's state
// changed: "tributary.<cluster-id>.groups.changed.". Subscribe to the prefix followed by
// "*" to hear every group. The payload is empty.
func GroupChangedPrefix(clusterID string) string {
	return clusterPrefix(clusterID) + "groups.changed."
}

// GroupChangedSubject is the subject announcing a change of Kafka group groupID (a
// member joined, left or expired, a generation or assignment changed): JoinGroup and
// SyncGroup calls waiting on any coordinator replica re-read the group when it arrives.
func GroupChangedSubject(clusterID, groupID string) string {
	return GroupChangedPrefix(clusterID) + GroupToken(groupID)
}

// GroupToken is a group id's subject token: the first 128 bits of SHA-256(group id) in
// hex. A group id may hold any character and up to 32767 bytes, while a NATS token may
// not hold every character and a subject line over 4 KiB makes the server close the
// connection; a (vanishingly unlikely) shared token costs only a spurious wake-up.
func GroupToken(groupID string) string { return token(groupID) }

// QueueChangedPrefix is the prefix of the subjects announcing that a queue's delivery
// state changed: "tributary.<cluster-id>.queues.changed.". Subscribe to the prefix
// followed by "*" to hear every queue.
func QueueChangedPrefix(clusterID string) string {
	return clusterPrefix(clusterID) + "queues.changed."
}

// QueueChangedSubject is the subject announcing a change of queue (a storage-core queue
// channel, e.g. "gcp.sub.s"): a lease ended (ack, nack, expiry, seek, purge) or a
// backoff passed. Waiters re-read the queue's state when it arrives.
func QueueChangedSubject(clusterID, queue string) string {
	return QueueChangedPrefix(clusterID) + QueueToken(queue)
}

// QueueToken is a queue's subject token: the first 128 bits of SHA-256(name) in hex.
// Queue names hold '.' (the subject token separator) and characters NATS subjects may
// not carry; a (vanishingly unlikely) shared token costs only a spurious wake-up.
func QueueToken(queue string) string { return token(queue) }

// SweepLockBucket is the JetStream KV bucket holding the cluster's sweep locks (one
// key per kind of sweep, DESIGN §4): "tributary_<cluster-id>_sweeps", each character
// of the cluster id outside [A-Za-z0-9_-] (bucket names allow no other) replaced by
// "_".
func SweepLockBucket(clusterID string) string {
	var sb strings.Builder
	sb.WriteString("tributary_")
	for _, r := range clusterID {
		if r < 128 && (r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')) {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
	}
	sb.WriteString("_sweeps")
	return sb.String()
}

// token is the first 128 bits of SHA-256(name) in hex: one NATS subject token.
func token(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:16])
}
