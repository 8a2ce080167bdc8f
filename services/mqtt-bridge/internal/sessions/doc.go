// Package sessions is the embedded listener's session store: the MQTT sessions that
// outlive the bridge process (MQTT 5 sections 4.1 and 4.3), kept in memory and, with
// listener.session-dir set, in a journal (internal/journal) in that directory, whose
// record format is this package's (format.go). The bridge's broker hook feeds it the
// broker's events and reads the sessions back at start; the bridge's store tells it
// about the batches that hold messages of persistent sessions.
//
// A listener client with a persistent session (MQTT 5: Session Expiry Interval > 0;
// MQTT 3.1.1: Clean Session 0) has its session state kept in the session store: the
// session itself (client id, protocol version, CONNECT properties, will; when it was
// disconnected), its subscriptions, the QoS 1/2 messages in flight to it (queued while
// it is offline, PUBREL sent), the QoS 2 packet identifiers it has been sent PUBREC for
// and not yet PUBREL'd, and the broker's retained messages. With listener.session-dir
// set, the store is a journal (internal/journal) in that directory and the embedded
// broker reads it back at start (mochi's storage hook interface): a client that
// reconnects with Clean Start 0 after a restart, even a kill -9, gets Session Present
// 1 and finds its subscriptions, its queued messages and its QoS 2 flows as they were.
// A session whose expiry interval ran out while the bridge was down is gone: its
// disconnection is known (written when it happened) or, for a session still connected
// when the process died, taken as the last heartbeat (written every second while a
// persistent session is connected) plus a second.
//
// What must be durable before which acknowledgement:
//
//   - A QoS 1/2 message: in storage-core (fsync) before its PUBACK/PUBREC, as before.
//   - A batch holding messages of persistent sessions: journaled, with the producer
//     identity it is sent with (storage.proto AppendProducer), before its Append is
//     sent (below). Written to the operating system, not synced: what the process
//     wrote survives its death, kill -9 included; a machine crash may lose the last
//     second of it (synced every second), which can make such a message stored twice,
//     never lose one that was acknowledged.
//   - The PUBREC state of a QoS 2 message: written before the PUBREC (not synced, same
//     reasoning: a lost one makes mochi answer PUBCOMP 0x92 to the PUBREL, and the
//     message is stored all the same).
//   - A session and its subscriptions: synced before the CONNACK and the SUBACK /
//     UNSUBACK (one fsync per connect or subscribe, shared by concurrent ones), so a
//     machine crash keeps them too.
//   - Messages queued to or in flight to a subscriber, and retained messages: written,
//     not synced.
//
// So no QoS 1 publish waits for a session-store fsync: its durability is storage-core's.
//
// Exactly once across a crash. A publisher with a persistent session resends, after
// it reconnects and is told Session Present 1, every QoS 1/2 PUBLISH it has no
// acknowledgement for, with DUP set and the same packet identifier (MQTT 5 section
// 4.4). The store remembers the last ReceiveMaximum such messages of each session (a
// client never has more unacknowledged: Receive Maximum, and acknowledgements are
// written in the order the messages came): packet identifier, a digest of the message
// (topic, payload, QoS, retain, properties) and, per mqtt-to-kafka group (mapping and
// partition), the batch its records were sent in and that batch's outcome. A resent
// PUBLISH that matches (DUP, same identifier, same digest) is not stored again where
// its first copy was: it waits for that batch's outcome, is acknowledged from it when
// stored, and appended again only where the batch was refused. The window between
// "append landed" and "acknowledgement sent" is closed by the journal: a batch is
// journaled before it is sent, and a batch journaled by an earlier process whose
// answer it never learnt is sent again at start, unchanged (same records, same old
// producer id, epoch and base sequence), until storage-core answers. storage-core
// keeps each producer's last batches per channel, rebuilt from disk when it starts, so
// the resend is recognised as a duplicate if the first one landed, and stored
// otherwise: stored once either way. Its outcome answers the client's resend.
//
// Limits: an MQTT 3.1.1 client (it is not told the Receive Maximum) that has more than
// ReceiveMaximum messages unacknowledged when the bridge stops may find the oldest
// stored twice; batches sent while the producer ids are not known yet (the
// coordinator unreachable since start) are not journaled; storage-core forgets a
// producer idle for a day, so a batch resent after a longer outage may be stored twice;
// a publisher's retry after 0x97 with a new packet identifier is recognised only while
// the bridge runs (the listener's doubts); mochi does not publish the will of a
// session that was connected when the process died, and a message mochi dropped for a slow persistent
// subscriber may be delivered to it after a restart; mochi hands a message to the
// listener's subscribers just after acknowledging it to its publisher, so a kill in
// between loses it for them (not for Kafka).
package sessions
