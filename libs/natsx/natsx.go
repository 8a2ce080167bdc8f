// Package natsx names the NATS subjects more than one service uses. NATS carries
// wake-ups and sweep coordination, never data (DESIGN §1, §4): a message on these
// subjects says "look again", and its payload is empty.
package natsx

import (
	"crypto/sha256"
	"encoding/hex"
)

// QueueChangedPrefix is the prefix of the subjects announcing that a queue's delivery
// state changed: "tributary.<cluster-id>.queues.changed.". Subscribe to the prefix
// followed by "*" to hear every queue.
func QueueChangedPrefix(clusterID string) string {
	return "tributary." + clusterID + ".queues.changed."
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
func QueueToken(queue string) string {
	sum := sha256.Sum256([]byte(queue))
	return hex.EncodeToString(sum[:16])
}
