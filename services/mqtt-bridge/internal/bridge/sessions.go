package bridge

// Listener sessions that outlive the bridge process (MQTT 5 sections 4.1 and 4.3).
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
// 4.4). The store remembers the last receiveMaximum such messages of each session (a
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
// receiveMaximum messages unacknowledged when the bridge stops may find the oldest
// stored twice; batches sent while the producer ids are not known yet (the
// coordinator unreachable since start) are not journaled; storage-core forgets a
// producer idle for a day, so a batch resent after a longer outage may be stored twice;
// a publisher's retry after 0x97 with a new packet identifier is recognised only while
// the bridge runs (doubts); mochi does not publish the will of a session that was
// connected when the process died, and a message mochi dropped for a slow persistent
// subscriber may be delivered to it after a restart; mochi hands a message to the
// listener's subscribers just after acknowledging it to its publisher, so a kill in
// between loses it for them (not for Kafka).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/journal"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/mapping"
)

// receiveMaximum is the Receive Maximum the listener advertises (MQTT 5 section
// 3.2.2.3.3): how many QoS 1/2 messages a client may have unacknowledged, and so how
// many received messages per session the store remembers for resends. The listener
// stores one publish of a client at a time, so a larger window would not make a
// client faster, only the store larger.
const receiveMaximum = 128

// heartbeatInterval is how often the journal notes that the bridge is alive while a
// persistent session is connected (and how often it is synced).
const heartbeatInterval = time.Second

// minCompactBytes is the journal size below which it is never compacted; above it, it
// is rewritten with only the live state once it is twice that state's size.
const minCompactBytes = 8 << 20

// journalFile is the session journal's name in listener.session-dir.
const journalFile = "listener.journal"

// Journal record kinds (the first byte of each record).
const (
	recClient     = 'C' // JSON storedClient: a persistent session, put
	recEnd        = 'X' // client id: the session ended (all its state goes)
	recSub        = 'S' // JSON storage.Subscription: put
	recUnsub      = 'U' // JSON storage.Subscription (client, filter): delete
	recInflight   = 'I' // JSON storage.Message (client, packet id): put
	recInflightRm = 'J' // JSON storage.Message (client, packet id): delete
	recRetain     = 'R' // JSON storage.Message (topic): put
	recRetainRm   = 'Q' // topic: delete
	recBatch      = 'B' // id, AppendRequest, JSON []batchMember: a batch about to be sent
	recAnswered   = 'A' // id, stored: the batch's outcome
	recTouch      = 'T' // JSON batchMember (client, packet id, instance): received again
	recEntry      = 'E' // JSON storedEntry (compacted journals): a remembered message
	recHeartbeat  = 'H' // unix ms, next id: alive at that time
)

// groupKey is one mqtt-to-kafka group of a message: its mapping and partition.
type groupKey struct {
	route     string
	partition int32
}

// groupState is where a group of a received message was sent: its batch's journal id
// (0: not journaled) and outcome.
type groupState struct {
	batch uint64
	out   *outcome
}

// receivedEntry is a QoS 1/2 message a persistent session's client sent, remembered
// so that its resend is not stored again. Fields other than busy and groups never
// change; groups is guarded by sessionStore.mu.
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

// origin names the received message a group's records come from, for the journal.
type origin struct {
	entry     *receivedEntry
	route     string
	partition int32
}

// receivedRing is one session's remembered messages, oldest first, at most
// receiveMaximum.
type receivedRing struct {
	byID  map[uint16]*receivedEntry
	order []*receivedEntry
}

// storedClient is a persistent session in the journal.
type storedClient struct {
	Client storage.Client `json:"client"`
	// Connected is when its current connection started (unix ms), 0 while offline.
	Connected int64 `json:"connected,omitempty"`
	// Disconnected is when its last connection ended (unix ms).
	Disconnected int64 `json:"disconnected,omitempty"`
}

// batchMember is a received message's group in a journaled batch.
type batchMember struct {
	Client    string `json:"c"`
	PacketID  uint16 `json:"p"`
	Instance  uint64 `json:"i"`
	Digest    []byte `json:"d,omitempty"`
	Route     string `json:"r,omitempty"`
	Partition int32  `json:"n,omitempty"`
}

// storedEntry is a remembered message in a compacted journal.
type storedEntry struct {
	Client   string        `json:"c"`
	PacketID uint16        `json:"p"`
	Instance uint64        `json:"i"`
	Digest   []byte        `json:"d"`
	Groups   []storedGroup `json:"g"`
}

type storedGroup struct {
	Route     string `json:"r"`
	Partition int32  `json:"n"`
	Batch     uint64 `json:"b"`
}

// storedBatch is a journaled batch: its request until it is answered, and its outcome.
type storedBatch struct {
	req *storagev1.AppendRequest
	out *outcome
}

// sessionStore is the listener's session state (see the top of this file). Lock order:
// mu before the journal's own locks; mu is never held while calling the broker, the
// store, or an fsync other than a compaction's.
type sessionStore struct {
	j   *journal.Journal // nil: sessions live in memory only (no listener.session-dir)
	log *zap.Logger

	mu       sync.Mutex
	clients  map[string]*storedClient
	subs     map[string]map[string]storage.Subscription
	inflight map[string]map[uint16]storage.Message
	retained map[string]storage.Message
	received map[string]*receivedRing
	batches  map[uint64]*storedBatch
	next     uint64 // next batch or instance id
	online   int    // persistent sessions connected now
	// compactAt is the journal size that triggers the next compaction.
	compactAt int64

	stop    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

func newSessionStore(log *zap.Logger) *sessionStore {
	return &sessionStore{
		log: log, clients: map[string]*storedClient{}, subs: map[string]map[string]storage.Subscription{},
		inflight: map[string]map[uint16]storage.Message{}, retained: map[string]storage.Message{},
		received: map[string]*receivedRing{}, batches: map[uint64]*storedBatch{}, next: 1,
		stop: make(chan struct{}),
	}
}

// openSessions opens (creating it) the session journal in dir and loads it: sessions
// whose expiry interval ran out while the bridge was down are dropped, and the journal
// is compacted. Errors: the directory cannot be created, the journal is used by
// another process (journal.ErrLocked), or it cannot be read or decoded.
func openSessions(dir string, log *zap.Logger) (*sessionStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("listener session dir: %w", err)
	}
	j, recs, dropped, err := journal.Open(filepath.Join(dir, journalFile))
	if err != nil {
		return nil, fmt.Errorf("listener session journal: %w", err)
	}
	if dropped > 0 {
		log.Warn("session journal: torn tail dropped (the process died while writing it)", zap.Int64("bytes", dropped))
	}
	s := newSessionStore(log)
	s.j = j
	var alive int64
	unwritten := 0
	for i, r := range recs {
		if len(r) == 0 {
			// The bridge writes no empty records: this is a run of zero bytes, a frame
			// the journal cannot tell from an empty record (length 0, CRC 0). A machine
			// crash leaves such a tail when the file grew but its last pages were never
			// written; the compaction below removes it.
			unwritten++
			continue
		}
		at, err := s.load(r)
		if err != nil {
			_ = j.Close()
			return nil, fmt.Errorf("listener session journal record %d: %w", i, err)
		}
		alive = max(alive, at)
	}
	if unwritten > 0 {
		log.Warn("session journal: zero-filled tail dropped (the machine stopped before writing it)", zap.Int("frames", unwritten))
	}
	expired := s.settle(alive, time.Now())
	if err := s.compact(); err != nil {
		_ = j.Close()
		return nil, fmt.Errorf("listener session journal: %w", err)
	}
	pending := 0
	for _, b := range s.batches {
		if b.req != nil {
			pending++
		}
	}
	log.Info("listener sessions loaded", zap.String("dir", dir), zap.Int("sessions", len(s.clients)),
		zap.Int("expired_while_down", expired), zap.Int("retained", len(s.retained)), zap.Int("batches_to_resend", pending))
	return s, nil
}

// load applies one journal record and returns the time it says the bridge was alive
// at (unix ms; 0 when it says nothing of it). r is not empty.
func (s *sessionStore) load(r []byte) (int64, error) {
	body := r[1:]
	switch r[0] {
	case recClient:
		var c storedClient
		if err := json.Unmarshal(body, &c); err != nil {
			return 0, err
		}
		s.clients[c.Client.ID] = &c
		return max(c.Connected, c.Disconnected), nil
	case recEnd:
		s.dropSession(string(body))
	case recSub:
		var sub storage.Subscription
		if err := json.Unmarshal(body, &sub); err != nil {
			return 0, err
		}
		s.putSub(sub)
	case recUnsub:
		var sub storage.Subscription
		if err := json.Unmarshal(body, &sub); err != nil {
			return 0, err
		}
		delete(s.subs[sub.Client], sub.Filter)
	case recInflight:
		var m storage.Message
		if err := json.Unmarshal(body, &m); err != nil {
			return 0, err
		}
		s.putInflight(m)
	case recInflightRm:
		var m storage.Message
		if err := json.Unmarshal(body, &m); err != nil {
			return 0, err
		}
		delete(s.inflight[m.Client], m.PacketID)
	case recRetain:
		var m storage.Message
		if err := json.Unmarshal(body, &m); err != nil {
			return 0, err
		}
		s.retained[m.TopicName] = m
	case recRetainRm:
		delete(s.retained, string(body))
	case recBatch:
		id, req, members, err := decodeBatch(body)
		if err != nil {
			return 0, err
		}
		b := &storedBatch{out: &outcome{done: make(chan struct{})}}
		if len(req.GetRecords()) > 0 {
			b.req = req
		}
		s.batches[id] = b
		s.next = max(s.next, id+1)
		for _, m := range members {
			e := s.remember(m.Client, m.PacketID, m.Instance, m.Digest)
			e.groups[groupKey{m.Route, m.Partition}] = &groupState{batch: id, out: b.out}
		}
	case recAnswered:
		if len(body) != 9 {
			return 0, fmt.Errorf("answered record of %d bytes", len(body))
		}
		b := s.batches[binary.BigEndian.Uint64(body)]
		if b == nil || isDone(b.out) {
			break // unknown, or answered already
		}
		b.req = nil
		b.out.stored = body[8] == 1
		if !b.out.stored {
			b.out.err = errors.New("refused by storage-core before the bridge restarted")
		}
		close(b.out.done)
	case recTouch:
		var m batchMember
		if err := json.Unmarshal(body, &m); err != nil {
			return 0, err
		}
		if ring := s.received[m.Client]; ring != nil {
			if e := ring.byID[m.PacketID]; e != nil && e.instance == m.Instance {
				ring.toBack(e)
			}
		}
	case recEntry:
		var se storedEntry
		if err := json.Unmarshal(body, &se); err != nil {
			return 0, err
		}
		e := s.remember(se.Client, se.PacketID, se.Instance, se.Digest)
		for _, g := range se.Groups {
			if b := s.batches[g.Batch]; b != nil {
				e.groups[groupKey{g.Route, g.Partition}] = &groupState{batch: g.Batch, out: b.out}
			}
		}
	case recHeartbeat:
		if len(body) != 16 {
			return 0, fmt.Errorf("heartbeat record of %d bytes", len(body))
		}
		s.next = max(s.next, binary.BigEndian.Uint64(body[8:]))
		return int64(binary.BigEndian.Uint64(body)), nil
	default:
		return 0, fmt.Errorf("unknown record kind %q", r[0])
	}
	return 0, nil
}

func isDone(o *outcome) bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// settle ends the loading: sessions still connected when the process stopped count
// as disconnected a heartbeat after the last sign of life (alive, unix ms); sessions
// past their expiry interval at now are dropped (their number is returned), and so is
// the state of sessions the journal does not hold.
func (s *sessionStore) settle(alive int64, now time.Time) (expired int) {
	lost := alive + heartbeatInterval.Milliseconds()
	for id, c := range s.clients {
		if c.Connected != 0 {
			c.Connected, c.Disconnected = 0, max(lost, c.Connected)
		}
		if remainingExpiry(c, now) <= 0 {
			s.dropSession(id)
			expired++
		}
	}
	for id := range s.subs {
		if s.clients[id] == nil {
			delete(s.subs, id)
		}
	}
	for id := range s.inflight {
		if s.clients[id] == nil {
			delete(s.inflight, id)
		}
	}
	for id := range s.received {
		if s.clients[id] == nil {
			delete(s.received, id)
		}
	}
	s.online = 0
	return expired
}

// remainingExpiry is how long the offline session c is kept from now: its Session
// Expiry Interval less the time since it was disconnected (MQTT 5 section 3.1.2.11.2).
// An MQTT 3.1.1 session has no expiry interval (the broker's maximum applies).
func remainingExpiry(c *storedClient, now time.Time) time.Duration {
	p := c.Client.Properties
	if c.Client.ProtocolVersion != 5 || !p.SessionExpiryIntervalFlag {
		return time.Duration(1<<63 - 1)
	}
	end := time.UnixMilli(c.Disconnected).Add(time.Duration(p.SessionExpiryInterval) * time.Second)
	return end.Sub(now)
}

func (s *sessionStore) putSub(sub storage.Subscription) {
	m := s.subs[sub.Client]
	if m == nil {
		m = map[string]storage.Subscription{}
		s.subs[sub.Client] = m
	}
	m[sub.Filter] = sub
}

func (s *sessionStore) putInflight(msg storage.Message) {
	m := s.inflight[msg.Client]
	if m == nil {
		m = map[uint16]storage.Message{}
		s.inflight[msg.Client] = m
	}
	m[msg.PacketID] = msg
}

// dropSession forgets everything of client's session (retained messages are the
// broker's, not the session's).
func (s *sessionStore) dropSession(client string) {
	if c := s.clients[client]; c != nil && c.Connected != 0 {
		s.online--
	}
	delete(s.clients, client)
	delete(s.subs, client)
	delete(s.inflight, client)
	delete(s.received, client)
}

// remember returns client's entry for packetID with instance, creating it (replacing
// an older message's with that packet identifier, forgetting the oldest beyond
// receiveMaximum) when there is none. Callers hold s.mu.
func (s *sessionStore) remember(client string, packetID uint16, instance uint64, digest []byte) *receivedEntry {
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
	if len(ring.order) > receiveMaximum {
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

// digestOf identifies a message's content: what a resend repeats (the client id and
// user name aside, which the session fixes).
func digestOf(m *mapping.Message) [16]byte {
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

// receipt is one PUBLISH of a remembered message being handled: release ends it.
type receipt struct {
	entry *receivedEntry
	busy  chan struct{}
	// resent: the PUBLISH repeats a remembered message (see receive).
	resent bool
}

// receive returns the receipt of a QoS 1/2 PUBLISH (packetID, DUP flag, content
// digest) of a persistent session's client. It is a resend when it repeats a
// remembered message (DUP, same packet identifier, same content); a resend first waits
// (until ctx ends) while an earlier receipt of it is still being answered (its session
// taken over meanwhile). Anything else is a new message, which replaces what its
// packet identifier held.
func (s *sessionStore) receive(ctx context.Context, client string, packetID uint16, dup bool, digest [16]byte) *receipt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *receivedEntry
	if ring := s.received[client]; dup && ring != nil {
		e = ring.byID[packetID]
	}
	if e == nil || e.digest != digest {
		e = s.remember(client, packetID, s.next, digest[:])
		e.busy = make(chan struct{})
		return &receipt{entry: e, busy: e.busy}
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
	return &receipt{entry: e, busy: e.busy, resent: true}
}

// release ends the receipt r (its PUBLISH was answered).
func (s *sessionStore) release(r *receipt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(r.busy)
	if r.entry.busy == r.busy {
		r.entry.busy = nil
	}
}

// attach gives each of groups (of a resent message) the outcome of the batch its
// records were sent in before, if they were: appendGroups then waits for it, and
// appends the group again only if it was not stored.
func (s *sessionStore) attach(e *receivedEntry, groups []*target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range groups {
		if st := e.groups[groupKey{g.route.Cfg.ID, g.partition}]; st != nil {
			g.pending = st.out
		}
	}
}

// sending implements batchJournal: each origin's entry learns its group's batch and
// outcome, and the batch is journaled (when it has a producer identity, without which
// sending it again could store it twice).
func (s *sessionStore) sending(req *storagev1.AppendRequest, origins []*origin, out *outcome) (uint64, error) {
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

// answered implements batchJournal.
func (s *sessionStore) answered(id uint64, out *outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.batches[id]; b != nil {
		b.req = nil
	}
	stored := byte(0)
	if out.stored {
		stored = 1
	}
	s.write(append(binary.BigEndian.AppendUint64([]byte{recAnswered}, id), stored))
}

func encodeBatch(id uint64, req *storagev1.AppendRequest, members []batchMember) ([]byte, error) {
	pb, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	mj, err := json.Marshal(members)
	if err != nil {
		return nil, err
	}
	rec := binary.BigEndian.AppendUint64([]byte{recBatch}, id)
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(pb)))
	return append(append(rec, pb...), mj...), nil
}

func decodeBatch(body []byte) (id uint64, req *storagev1.AppendRequest, members []batchMember, err error) {
	if len(body) < 12 {
		return 0, nil, nil, fmt.Errorf("batch record of %d bytes", len(body))
	}
	id = binary.BigEndian.Uint64(body)
	n := int(binary.BigEndian.Uint32(body[8:]))
	if n > len(body)-12 {
		return 0, nil, nil, fmt.Errorf("batch record: request of %d bytes in %d", n, len(body)-12)
	}
	req = &storagev1.AppendRequest{}
	if err := proto.Unmarshal(body[12:12+n], req); err != nil {
		return 0, nil, nil, err
	}
	if rest := body[12+n:]; len(rest) > 0 {
		if err := json.Unmarshal(rest, &members); err != nil {
			return 0, nil, nil, err
		}
	}
	return id, req, members, nil
}

func jsonRecord(kind byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs are written; a failure is a programming error.
		panic(fmt.Sprintf("session journal record %q: %v", kind, err))
	}
	return append([]byte{kind}, b...)
}

// write appends recs to the journal (nothing without one), logging a failure: the
// state it records is then lost on a restart. Callers hold s.mu.
func (s *sessionStore) write(recs ...[]byte) {
	if s.j == nil || s.stopped {
		return
	}
	if err := s.j.Append(recs...); err != nil {
		s.log.Error("session journal write failed; this session state will not survive a restart", zap.Error(err))
		return
	}
	s.maybeCompact()
}

// sync makes what was written durable (for the acknowledgements that promise it),
// logging a failure.
func (s *sessionStore) sync() {
	if s.j == nil {
		return
	}
	if err := s.j.Sync(); err != nil && !errors.Is(err, journal.ErrClosed) {
		s.log.Error("session journal sync failed", zap.Error(err))
	}
}

// maybeCompact compacts the journal once it has grown past compactAt. Callers hold
// s.mu.
func (s *sessionStore) maybeCompact() {
	if s.j.Size() < s.compactAt {
		return
	}
	if err := s.compact(); err != nil {
		s.log.Error("session journal compaction failed", zap.Error(err))
	}
}

// compact rewrites the journal with the live state only: a heartbeat, the sessions,
// subscriptions, messages in flight, retained messages, the batches not yet answered
// (with their records) or still referenced (their outcome), and the remembered
// messages in order. Callers hold s.mu (or own s alone).
func (s *sessionStore) compact() error {
	var recs [][]byte
	hb := binary.BigEndian.AppendUint64([]byte{recHeartbeat}, uint64(time.Now().UnixMilli()))
	recs = append(recs, binary.BigEndian.AppendUint64(hb, s.next))
	for _, c := range s.clients {
		recs = append(recs, jsonRecord(recClient, c))
	}
	for _, m := range s.subs {
		for _, sub := range m {
			recs = append(recs, jsonRecord(recSub, sub))
		}
	}
	for _, m := range s.inflight {
		for _, msg := range m {
			recs = append(recs, jsonRecord(recInflight, msg))
		}
	}
	for _, msg := range s.retained {
		recs = append(recs, jsonRecord(recRetain, msg))
	}
	referenced := map[uint64]bool{}
	var entries [][]byte
	for _, ring := range s.received {
		for _, e := range ring.order {
			se := storedEntry{Client: e.client, PacketID: e.packetID, Instance: e.instance, Digest: e.digest[:]}
			for k, g := range e.groups {
				if g.batch != 0 && s.batches[g.batch] != nil {
					se.Groups = append(se.Groups, storedGroup{Route: k.route, Partition: k.partition, Batch: g.batch})
					referenced[g.batch] = true
				}
			}
			if len(se.Groups) > 0 {
				entries = append(entries, jsonRecord(recEntry, se))
			}
		}
	}
	for id, b := range s.batches {
		// A batch keeps its request until answered is called (after its outcome is
		// known): written whole until then, as its outcome after.
		switch {
		case b.req != nil:
			rec, err := encodeBatch(id, b.req, nil)
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		case referenced[id]:
			rec, err := encodeBatch(id, &storagev1.AppendRequest{}, nil)
			if err != nil {
				return err
			}
			stored := byte(0)
			if b.out.stored {
				stored = 1
			}
			recs = append(recs, rec, append(binary.BigEndian.AppendUint64([]byte{recAnswered}, id), stored))
		default:
			delete(s.batches, id)
		}
	}
	recs = append(recs, entries...)
	if err := s.j.Rewrite(recs); err != nil {
		return err
	}
	s.compactAt = max(minCompactBytes, 2*s.j.Size())
	return nil
}

// start sends the batches an earlier process journaled and never learnt the answer
// for again (store.resend) and starts the heartbeat.
func (s *sessionStore) start(st *store) {
	if s.j == nil {
		return
	}
	s.mu.Lock()
	for id, b := range s.batches {
		if b.req == nil {
			continue
		}
		req, out := b.req, b.out
		s.log.Info("sending a batch journaled before the restart again", zap.Uint64("batch", id), zap.String("channel", req.GetChannel()), zap.Int("records", len(req.GetRecords())))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			err := st.resend(req)
			out.stored, out.err, out.at = err == nil, err, time.Now()
			close(out.done)
			if inDoubt(err) {
				return // the bridge stopped first: the next process sends it again
			}
			if err != nil {
				s.log.Warn("batch journaled before the restart refused", zap.Uint64("batch", id), zap.Error(err))
			}
			s.answered(id, out)
		}()
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.heartbeat()
}

// heartbeat notes every heartbeatInterval, while a persistent session is connected,
// that the bridge is alive, and syncs the journal.
func (s *sessionStore) heartbeat() {
	defer s.wg.Done()
	t := time.NewTicker(heartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.online > 0 {
			hb := binary.BigEndian.AppendUint64([]byte{recHeartbeat}, uint64(time.Now().UnixMilli()))
			s.write(binary.BigEndian.AppendUint64(hb, s.next))
		}
		s.mu.Unlock()
		s.sync()
	}
}

// close stops the heartbeat, waits for the batches being sent again (they end with
// the bridge's context), and syncs and closes the journal.
func (s *sessionStore) close() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
	if s.j != nil {
		if err := s.j.Close(); err != nil {
			s.log.Error("session journal close", zap.Error(err))
		}
	}
}

// persistent reports whether cl's session outlives its connection: MQTT 5 Session
// Expiry Interval > 0, MQTT 3.1.1 Clean Session 0.
func persistent(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func clientRecord(cl *mqtt.Client) storage.Client {
	props := cl.Properties.Props.Copy(false)
	return storage.Client{
		ID: cl.ID, T: storage.ClientKey, Remote: cl.Net.Remote, Listener: cl.Net.Listener,
		Username: bytes.Clone(cl.Properties.Username), Clean: cl.Properties.Clean, ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	}
}

// subscriptionRecord is client's subscription f, granted qos, as the journal keeps it.
func subscriptionRecord(client string, f packets.Subscription, qos byte) storage.Subscription {
	return storage.Subscription{
		ID: client + ":" + f.Filter, T: storage.SubscriptionKey, Client: client, Filter: f.Filter, Qos: qos,
		Identifier: f.Identifier, NoLocal: f.NoLocal, RetainHandling: f.RetainHandling, RetainAsPublished: f.RetainAsPublished,
	}
}

func messageRecord(cl *mqtt.Client, pk packets.Packet) storage.Message {
	p := pk.Properties.Copy(false)
	return storage.Message{
		T: storage.InflightKey, Client: cl.ID, Origin: pk.Origin, FixedHeader: pk.FixedHeader, TopicName: pk.TopicName,
		Payload: pk.Payload, Created: pk.Created, PacketID: pk.PacketID,
		Properties: storage.MessageProperties{
			PayloadFormat: p.PayloadFormat, PayloadFormatFlag: p.PayloadFormatFlag, MessageExpiryInterval: p.MessageExpiryInterval,
			ContentType: p.ContentType, ResponseTopic: p.ResponseTopic, CorrelationData: p.CorrelationData,
			SubscriptionIdentifier: p.SubscriptionIdentifier, TopicAlias: p.TopicAlias, User: p.User,
		},
	}
}

// sessionHook keeps the embedded broker's session state in the session store and
// gives it back at start (mochi's storage hook interface). Without a journal it only
// ends the remembered messages of sessions that end.
type sessionHook struct {
	mqtt.HookBase
	s   *sessionStore
	srv *mqtt.Server
}

func (h *sessionHook) ID() string { return "tributary-sessions" }

func (h *sessionHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnSessionEstablish, mqtt.OnDisconnect, mqtt.OnClientExpired:
		return true
	case mqtt.OnSessionEstablished, mqtt.OnSubscribed, mqtt.OnUnsubscribed, mqtt.OnRetainMessage, mqtt.OnRetainedExpired, mqtt.OnWillSent,
		mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnPacketEncode,
		mqtt.StoredClients, mqtt.StoredSubscriptions, mqtt.StoredInflightMessages, mqtt.StoredRetainedMessages:
		return h.s.j != nil
	}
	return false
}

// OnSessionEstablish (before the CONNACK) records a persistent session, synced: a
// CONNACK never promises a session a crash could lose. A new session (Session Present
// 0) first ends what was kept under its client id; a connection whose session ends
// with it ends the kept one.
func (h *sessionHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if cl.Net.Inline {
		return
	}
	present := false
	if existing, ok := h.srv.Clients.Get(cl.ID); ok {
		// mochi's inheritClientSession: the session is taken over unless either side
		// starts clean.
		present = !pk.Connect.Clean && !(existing.Properties.Clean && existing.Properties.ProtocolVersion < 5)
	}
	s := h.s
	s.mu.Lock()
	wrote := false
	if !present || !persistent(cl) {
		wrote = s.endSession(cl.ID)
	}
	if persistent(cl) && s.j != nil {
		wrote = true
		c := s.clients[cl.ID]
		if c == nil {
			c = &storedClient{}
			s.clients[cl.ID] = c
		}
		if c.Connected == 0 {
			s.online++
		}
		c.Client, c.Connected = clientRecord(cl), time.Now().UnixMilli()
		s.write(jsonRecord(recClient, c))
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// OnSessionEstablished (after the broker took the earlier session over) records the
// subscriptions the session has and the journal does not: those of a session that
// was not persistent until this connection (Clean Start 0 with a Session Expiry
// Interval > 0 now, 0 before). Its messages in flight were recorded as the broker sent
// them again.
func (h *sessionHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	s := h.s
	s.mu.Lock()
	wrote := false
	if s.clients[cl.ID] != nil {
		for _, f := range cl.State.Subscriptions.GetAll() {
			if _, ok := s.subs[cl.ID][f.Filter]; ok {
				continue
			}
			sub := subscriptionRecord(cl.ID, f, f.Qos)
			s.putSub(sub)
			s.write(jsonRecord(recSub, sub))
			wrote = true
		}
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// endSession ends client's kept session, in the journal too, and reports whether
// there was one. Callers hold s.mu.
func (s *sessionStore) endSession(client string) bool {
	_, c := s.clients[client]
	_, r := s.received[client]
	if !c && !r && s.subs[client] == nil && s.inflight[client] == nil {
		return false
	}
	s.dropSession(client)
	s.write(append([]byte{recEnd}, client...))
	return true
}

// OnDisconnect ends a session that ends with its connection, and notes when a
// persistent one went offline (its expiry interval runs from then; a DISCONNECT may
// have changed it). A connection whose session was taken over by a newer one, and
// the sessions the broker restores at start, are left alone.
func (h *sessionHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.Net.Conn == nil || cl.Net.Inline || cl.IsTakenOver() || errors.Is(cl.StopCause(), packets.ErrSessionTakenOver) {
		return
	}
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if expire {
		s.endSession(cl.ID)
		return
	}
	c := s.clients[cl.ID]
	if c == nil || s.j == nil {
		return
	}
	if c.Connected != 0 {
		s.online--
	}
	c.Client, c.Connected, c.Disconnected = clientRecord(cl), 0, time.Now().UnixMilli()
	s.write(jsonRecord(recClient, c))
}

// OnClientExpired ends a session whose expiry interval ran out, and its subscriptions
// in the broker (which mochi would otherwise keep matching for a client it forgot).
func (h *sessionHook) OnClientExpired(cl *mqtt.Client) {
	h.s.mu.Lock()
	h.s.endSession(cl.ID)
	h.s.mu.Unlock()
	h.srv.UnsubscribeClient(cl)
}

// OnSubscribed records a persistent session's granted subscriptions, synced before the
// SUBACK.
func (h *sessionHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	s := h.s
	s.mu.Lock()
	if s.clients[cl.ID] == nil {
		s.mu.Unlock()
		return
	}
	for i, f := range pk.Filters {
		if i >= len(codes) || codes[i] >= packets.ErrUnspecifiedError.Code {
			continue
		}
		sub := subscriptionRecord(cl.ID, f, codes[i])
		s.putSub(sub)
		s.write(jsonRecord(recSub, sub))
	}
	s.mu.Unlock()
	s.sync()
}

// OnUnsubscribed forgets a session's subscriptions, synced before the UNSUBACK.
func (h *sessionHook) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	s := h.s
	s.mu.Lock()
	wrote := false
	for _, f := range pk.Filters {
		if _, ok := s.subs[cl.ID][f.Filter]; ok {
			delete(s.subs[cl.ID], f.Filter)
			s.write(jsonRecord(recUnsub, storage.Subscription{Client: cl.ID, Filter: f.Filter}))
			wrote = true
		}
	}
	s.mu.Unlock()
	if wrote {
		s.sync()
	}
}

// OnRetainMessage records the broker's retained message for a topic (r -1: cleared).
func (h *sessionHook) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == -1 {
		if _, ok := s.retained[pk.TopicName]; ok {
			delete(s.retained, pk.TopicName)
			s.write(append([]byte{recRetainRm}, pk.TopicName...))
		}
		return
	}
	m := messageRecord(cl, pk)
	m.T, m.Client, m.PacketID = storage.RetainedKey, "", 0
	s.retained[pk.TopicName] = m
	s.write(jsonRecord(recRetain, m))
}

// OnRetainedExpired forgets a retained message whose expiry passed.
func (h *sessionHook) OnRetainedExpired(topic string) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.retained[topic]; ok {
		delete(s.retained, topic)
		s.write(append([]byte{recRetainRm}, topic...))
	}
}

// OnWillSent records that a session's will was published (it is not sent again).
func (h *sessionHook) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[cl.ID]; c != nil {
		c.Client.Will = storage.ClientWill(cl.Properties.Will)
		s.write(jsonRecord(recClient, c))
	}
}

// OnQosPublish records a QoS 1/2 flow of a persistent session: a message to the
// client (queued or sent), or the PUBREC of a QoS 2 message from it. The PUBACK of a
// QoS 1 message from it is not recorded: it ends its flow at once (its resend is
// recognised by the remembered messages instead).
func (h *sessionHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if pk.FixedHeader.Type == packets.Puback {
		return
	}
	h.putInflight(cl, pk)
}

func (h *sessionHook) putInflight(cl *mqtt.Client, pk packets.Packet) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clients[cl.ID] == nil {
		return
	}
	m := messageRecord(cl, pk)
	s.putInflight(m)
	s.write(jsonRecord(recInflight, m))
}

// OnPacketEncode records the PUBREL the broker sends for a QoS 2 message to a
// persistent session (mochi keeps it in flight without telling the storage hooks), so
// that it, not the PUBLISH, is sent again after a restart.
func (h *sessionHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Pubrel && pk.ReasonCode < packets.ErrUnspecifiedError.Code && !cl.Net.Inline {
		h.putInflight(cl, pk)
	}
	return pk
}

// OnQosComplete forgets a finished QoS 1/2 flow.
func (h *sessionHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.inflight[cl.ID][pk.PacketID]; ok {
		delete(s.inflight[cl.ID], pk.PacketID)
		s.write(jsonRecord(recInflightRm, storage.Message{Client: cl.ID, PacketID: pk.PacketID}))
	}
}

// OnQosDropped forgets a QoS 1/2 flow the broker gave up (refused, expired).
func (h *sessionHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { h.OnQosComplete(cl, pk) }

// StoredClients gives the broker the kept sessions at start, each with what remains
// of its expiry interval, so that it expires when it would have had the bridge not
// stopped.
func (h *sessionHook) StoredClients() ([]storage.Client, error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]storage.Client, 0, len(s.clients))
	for _, c := range s.clients {
		sc := c.Client
		if sc.ProtocolVersion == 5 && sc.Properties.SessionExpiryIntervalFlag {
			left := remainingExpiry(c, now)
			sc.Properties.SessionExpiryInterval = uint32(max(1, (left+time.Second-1)/time.Second))
		}
		out = append(out, sc)
	}
	return out, nil
}

// StoredSubscriptions gives the broker the kept sessions' subscriptions at start.
func (h *sessionHook) StoredSubscriptions() ([]storage.Subscription, error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Subscription
	for _, m := range s.subs {
		for _, sub := range m {
			out = append(out, sub)
		}
	}
	return out, nil
}

// StoredInflightMessages gives the broker the kept sessions' QoS 1/2 flows at start.
func (h *sessionHook) StoredInflightMessages() ([]storage.Message, error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storage.Message
	for _, m := range s.inflight {
		for _, msg := range m {
			out = append(out, msg)
		}
	}
	return out, nil
}

// StoredRetainedMessages gives the broker its retained messages at start.
func (h *sessionHook) StoredRetainedMessages() ([]storage.Message, error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]storage.Message, 0, len(s.retained))
	for _, m := range s.retained {
		out = append(out, m)
	}
	return out, nil
}
