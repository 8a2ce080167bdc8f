package sessions

// The messages persistent sessions' clients sent, remembered so that a resend is not
// stored again, and the batches their records were sent in (see the package doc,
// "Exactly once across a crash").

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// ReceiveMaximum is the Receive Maximum the listener advertises (MQTT 5 section
// 3.2.2.3.3): how many QoS 1/2 messages a client may have unacknowledged, and so how
// many received messages per session the store remembers for resends. The listener
// stores one publish of a client at a time, so a larger window would not make a
// client faster, only the store larger.
const ReceiveMaximum = 128

// Outcome is the definite fate of a sent batch, known once Done is closed.
type Outcome struct {
	Done chan struct{}
	// Stored: the batch is durable, once. False: refused, or still unknown when the
	// bridge stopped (Err says which).
	Stored bool
	Err    error
	At     time.Time // when it became known
}

// NewOutcome is the outcome of a batch whose fate is not known yet.
func NewOutcome() *Outcome { return &Outcome{Done: make(chan struct{})} }

// groupKey is one mqtt-to-kafka group of a message: its mapping and partition.
type groupKey struct {
	route     string
	partition int32
}

// groupState is where a group of a received message was sent: its batch's journal id
// (0: not journaled) and outcome.
type groupState struct {
	batch uint64
	out   *Outcome
}

// receivedEntry is a QoS 1/2 message a persistent session's client sent, remembered
// so that its resend is not stored again. Fields other than busy and groups never
// change; groups is guarded by Store.mu.
type receivedEntry struct {
	client   string
	packetID uint16
	// instance tells this message from a later one with the same packet identifier.
	instance uint64
	digest   [16]byte
	groups   map[groupKey]*groupState
	// busy is closed once the receipt being handled now has been answered (nil:
	// none is).
	busy chan struct{}
}

// Origin names the received message a group's records come from, for the journal
// (Receipt.Origin).
type Origin struct {
	entry     *receivedEntry
	route     string
	partition int32
}

// receivedRing is one session's remembered messages, oldest first, at most
// ReceiveMaximum.
type receivedRing struct {
	byID  map[uint16]*receivedEntry
	order []*receivedEntry
}

// storedBatch is a journaled batch: its request until it is answered, and its outcome.
type storedBatch struct {
	req *storagev1.AppendRequest
	out *Outcome
}

// remember returns client's entry for packetID with instance, creating it (replacing
// an older message's with that packet identifier, forgetting the oldest beyond
// ReceiveMaximum) when there is none. Callers hold s.mu.
func (s *Store) remember(client string, packetID uint16, instance uint64, digest []byte) *receivedEntry {
	ring := s.received[client]
	if ring == nil {
		ring = &receivedRing{byID: map[uint16]*receivedEntry{}}
		s.received[client] = ring
	}
	if e := ring.byID[packetID]; e != nil {
		if e.instance == instance {
			return e
		}
		ring.remove(e)
	}
	e := &receivedEntry{client: client, packetID: packetID, instance: instance, groups: map[groupKey]*groupState{}}
	copy(e.digest[:], digest)
	ring.byID[packetID] = e
	ring.order = append(ring.order, e)
	if len(ring.order) > ReceiveMaximum {
		delete(ring.byID, ring.order[0].packetID)
		ring.order = ring.order[1:]
	}
	s.next = max(s.next, instance+1)
	return e
}

func (r *receivedRing) remove(e *receivedEntry) {
	delete(r.byID, e.packetID)
	for i, x := range r.order {
		if x == e {
			r.order = append(r.order[:i], r.order[i+1:]...)
			return
		}
	}
}

// toBack makes e the most recently received.
func (r *receivedRing) toBack(e *receivedEntry) {
	r.remove(e)
	r.byID[e.packetID] = e
	r.order = append(r.order, e)
}

// Digest identifies a message's content: what a resend repeats (the client id and
// user name aside, which the session fixes). It is journaled: changing it makes
// resends of messages received before the change unrecognised.
func Digest(m *mapping.Message) [16]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(m.Topic))
	field(m.Payload)
	flags := []byte{m.QoS, 0, 0}
	if m.Retain {
		flags[1] = 1
	}
	if m.PayloadFormatIndicator != nil {
		flags[2] = 1 + *m.PayloadFormatIndicator
	}
	field(flags)
	field([]byte(m.ContentType))
	field(m.CorrelationData)
	field([]byte(m.ResponseTopic))
	if m.MessageExpiryInterval != nil {
		field(binary.BigEndian.AppendUint32(nil, *m.MessageExpiryInterval))
	} else {
		field(nil)
	}
	for _, u := range m.UserProperties {
		field([]byte(u.Key))
		field([]byte(u.Value))
	}
	var d [16]byte
	copy(d[:], h.Sum(nil))
	return d
}

// Receipt is one PUBLISH of a remembered message being handled: Release ends it.
type Receipt struct {
	entry *receivedEntry
	busy  chan struct{}
	// resent: the PUBLISH repeats a remembered message (see Receive).
	resent bool
}

// Resent reports whether the PUBLISH repeats a remembered message (see Receive).
func (r *Receipt) Resent() bool { return r.resent }

// Origin names r's message as the source of its records for the mqtt-to-kafka group
// route (mapping id) and partition.
func (r *Receipt) Origin(route string, partition int32) *Origin {
	return &Origin{entry: r.entry, route: route, partition: partition}
}

// Receive returns the receipt of a QoS 1/2 PUBLISH (packetID, DUP flag, content
// digest) of a persistent session's client. It is a resend when it repeats a
// remembered message (DUP, same packet identifier, same content); a resend first waits
// (until ctx ends) while an earlier receipt of it is still being answered (its session
// taken over meanwhile). Anything else is a new message, which replaces what its
// packet identifier held.
func (s *Store) Receive(ctx context.Context, client string, packetID uint16, dup bool, digest [16]byte) *Receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *receivedEntry
	if ring := s.received[client]; dup && ring != nil {
		e = ring.byID[packetID]
	}
	if e == nil || e.digest != digest {
		e = s.remember(client, packetID, s.next, digest[:])
		e.busy = make(chan struct{})
		return &Receipt{entry: e, busy: e.busy}
	}
	for e.busy != nil && ctx.Err() == nil {
		busy := e.busy
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
		}
		s.mu.Lock()
	}
	if ring := s.received[client]; ring != nil && ring.byID[packetID] == e {
		ring.toBack(e)
		s.write(jsonRecord(recTouch, batchMember{Client: client, PacketID: packetID, Instance: e.instance}))
	}
	e.busy = make(chan struct{})
	return &Receipt{entry: e, busy: e.busy, resent: true}
}

// Release ends the receipt r (its PUBLISH was answered).
func (s *Store) Release(r *Receipt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(r.busy)
	if r.entry.busy == r.busy {
		r.entry.busy = nil
	}
}

// Sent returns, for the resent message of r, the outcome of the batch its records
// for the group route (mapping id) and partition were sent in before, or nil if they
// were not: the caller then waits for it, and appends the group again only if it was
// not stored.
func (s *Store) Sent(r *Receipt, route string, partition int32) *Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := r.entry.groups[groupKey{route, partition}]; st != nil {
		return st.out
	}
	return nil
}

// Sending is called before the first Append of a batch holding records of the
// received messages origins, with the request as it will be sent (producer identity
// included) and the outcome it will get: each origin's entry learns its group's batch
// and outcome, and the batch is journaled (when it has a producer identity, without
// which sending it again could store it twice). It returns the id to give Answered (0:
// nothing to tell); an error (the journal write failed) keeps the batch from being
// sent.
func (s *Store) Sending(req *storagev1.AppendRequest, origins []*Origin, out *Outcome) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var id uint64
	if s.j != nil && req.Producer != nil {
		id = s.next
		s.next++
		members := make([]batchMember, len(origins))
		for i, o := range origins {
			members[i] = batchMember{Client: o.entry.client, PacketID: o.entry.packetID, Instance: o.entry.instance, Digest: o.entry.digest[:], Route: o.route, Partition: o.partition}
		}
		rec, err := encodeBatch(id, req, members)
		if err != nil {
			return 0, err
		}
		if err := s.j.Append(rec); err != nil {
			return 0, fmt.Errorf("listener session journal: %w", err)
		}
		s.batches[id] = &storedBatch{req: req, out: out}
		s.maybeCompact()
	}
	for _, o := range origins {
		o.entry.groups[groupKey{o.route, o.partition}] = &groupState{batch: id, out: out}
	}
	return id, nil
}

// Answered journals the outcome out of batch id (from Sending) once storage-core
// answered it; not when the bridge stopped with the batch still in doubt (the next
// process sends it again).
func (s *Store) Answered(id uint64, out *Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.batches[id]; b != nil {
		b.req = nil
	}
	s.write(answeredRecord(id, out))
}
