package sessions

// The session journal's record format: each record is one byte of kind, then its
// body. load applies one record to the state; compact writes the live state as
// records.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"google.golang.org/protobuf/proto"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// JournalFile is the session journal's name in listener.session-dir.
const JournalFile = "listener.journal"

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

// load applies one journal record and returns the time it says the bridge was alive
// at (unix ms; 0 when it says nothing of it). r is not empty.
func (s *Store) load(r []byte) (int64, error) {
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
		b := &storedBatch{out: NewOutcome()}
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
		b.out.Stored = body[8] == 1
		if !b.out.Stored {
			b.out.Err = errors.New("refused by storage-core before the bridge restarted")
		}
		close(b.out.Done)
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

func isDone(o *Outcome) bool {
	select {
	case <-o.Done:
		return true
	default:
		return false
	}
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

// answeredRecord is the recAnswered record of batch id with its outcome.
func answeredRecord(id uint64, out *Outcome) []byte {
	stored := byte(0)
	if out.Stored {
		stored = 1
	}
	return append(binary.BigEndian.AppendUint64([]byte{recAnswered}, id), stored)
}

// heartbeatRecord is the recHeartbeat record of now with the next id.
func heartbeatRecord(now time.Time, next uint64) []byte {
	hb := binary.BigEndian.AppendUint64([]byte{recHeartbeat}, uint64(now.UnixMilli()))
	return binary.BigEndian.AppendUint64(hb, next)
}

func jsonRecord(kind byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs are written; a failure is a programming error.
		panic(fmt.Sprintf("session journal record %q: %v", kind, err))
	}
	return append([]byte{kind}, b...)
}

// compact rewrites the journal with the live state only: a heartbeat, the sessions,
// subscriptions, messages in flight, retained messages, the batches not yet answered
// (with their records) or still referenced (their outcome), and the remembered
// messages in order. Callers hold s.mu (or own s alone).
func (s *Store) compact() error {
	var recs [][]byte
	recs = append(recs, heartbeatRecord(time.Now(), s.next))
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
			recs = append(recs, rec, answeredRecord(id, b.out))
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
