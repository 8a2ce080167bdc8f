package sessions

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"go.uber.org/zap"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/journal"
)

// heartbeatInterval is how often the journal notes that the bridge is alive while a
// persistent session is connected (and how often it is synced).
const heartbeatInterval = time.Second

// minCompactBytes is the journal size below which it is never compacted; above it, it
// is rewritten with only the live state once it is twice that state's size.
const minCompactBytes = 8 << 20

// Store is the listener's session state (see the package doc). Lock order: mu before
// the journal's own locks; mu is never held while calling the broker, the bridge's
// store, or an fsync other than a compaction's.
type Store struct {
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

// New returns a store that keeps sessions in memory only: it remembers the messages
// of persistent sessions' clients for their resends while the bridge runs, and keeps
// no session state.
func New(log *zap.Logger) *Store {
	return &Store{
		log: log, clients: map[string]*storedClient{}, subs: map[string]map[string]storage.Subscription{},
		inflight: map[string]map[uint16]storage.Message{}, retained: map[string]storage.Message{},
		received: map[string]*receivedRing{}, batches: map[uint64]*storedBatch{}, next: 1,
		stop: make(chan struct{}),
	}
}

// Open opens (creating it) the session journal in dir and loads it: sessions whose
// expiry interval ran out while the bridge was down are dropped, and the journal is
// compacted. Errors: the directory cannot be created, the journal is used by another
// process (journal.ErrLocked), or it cannot be read or decoded.
func Open(dir string, log *zap.Logger) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("listener session dir: %w", err)
	}
	j, recs, dropped, err := journal.Open(filepath.Join(dir, JournalFile))
	if err != nil {
		return nil, fmt.Errorf("listener session journal: %w", err)
	}
	if dropped > 0 {
		log.Warn("session journal: torn tail dropped (the process died while writing it)", zap.Int64("bytes", dropped))
	}
	s := New(log)
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

// Journaled reports whether the store keeps session state (in its journal): without
// one it only remembers the messages of persistent sessions' clients.
func (s *Store) Journaled() bool { return s.j != nil }

// settle ends the loading: sessions still connected when the process stopped count
// as disconnected a heartbeat after the last sign of life (alive, unix ms); sessions
// past their expiry interval at now are dropped (their number is returned), and so is
// the state of sessions the journal does not hold.
func (s *Store) settle(alive int64, now time.Time) (expired int) {
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

func (s *Store) putSub(sub storage.Subscription) {
	m := s.subs[sub.Client]
	if m == nil {
		m = map[string]storage.Subscription{}
		s.subs[sub.Client] = m
	}
	m[sub.Filter] = sub
}

func (s *Store) putInflight(msg storage.Message) {
	m := s.inflight[msg.Client]
	if m == nil {
		m = map[uint16]storage.Message{}
		s.inflight[msg.Client] = m
	}
	m[msg.PacketID] = msg
}

// dropSession forgets everything of client's session (retained messages are the
// broker's, not the session's).
func (s *Store) dropSession(client string) {
	if c := s.clients[client]; c != nil && c.Connected != 0 {
		s.online--
	}
	delete(s.clients, client)
	delete(s.subs, client)
	delete(s.inflight, client)
	delete(s.received, client)
}

// endSession ends client's kept session, in the journal too, and reports whether
// there was one. Callers hold s.mu.
func (s *Store) endSession(client string) bool {
	_, c := s.clients[client]
	_, r := s.received[client]
	if !c && !r && s.subs[client] == nil && s.inflight[client] == nil {
		return false
	}
	s.dropSession(client)
	s.write(append([]byte{recEnd}, client...))
	return true
}

// write appends recs to the journal (nothing without one), logging a failure: the
// state it records is then lost on a restart. Callers hold s.mu.
func (s *Store) write(recs ...[]byte) {
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
func (s *Store) sync() {
	if s.j == nil {
		return
	}
	if err := s.j.Sync(); err != nil && !errors.Is(err, journal.ErrClosed) {
		s.log.Error("session journal sync failed", zap.Error(err))
	}
}

// maybeCompact compacts the journal once it has grown past compactAt. Callers hold
// s.mu.
func (s *Store) maybeCompact() {
	if s.j.Size() < s.compactAt {
		return
	}
	if err := s.compact(); err != nil {
		s.log.Error("session journal compaction failed", zap.Error(err))
	}
}

// Start sends the batches an earlier process journaled and never learnt the answer
// for again, each with resend (which sends it unchanged until storage-core answers or
// the bridge stops, and returns nil when it is stored; inDoubt tells an error that
// leaves its fate unknown), and starts the heartbeat.
func (s *Store) Start(resend func(*storagev1.AppendRequest) error, inDoubt func(error) bool) {
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
			err := resend(req)
			out.Stored, out.Err, out.At = err == nil, err, time.Now()
			close(out.Done)
			if inDoubt(err) {
				return // the bridge stopped first: the next process sends it again
			}
			if err != nil {
				s.log.Warn("batch journaled before the restart refused", zap.Uint64("batch", id), zap.Error(err))
			}
			s.Answered(id, out)
		}()
	}
	s.mu.Unlock()
	s.wg.Add(1)
	go s.heartbeat()
}

// heartbeat notes every heartbeatInterval, while a persistent session is connected,
// that the bridge is alive, and syncs the journal.
func (s *Store) heartbeat() {
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
			s.write(heartbeatRecord(time.Now(), s.next))
		}
		s.mu.Unlock()
		s.sync()
	}
}

// Close stops the heartbeat, waits for the batches being sent again (they end with
// the bridge's context), and syncs and closes the journal. Later writes are dropped.
func (s *Store) Close() {
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
