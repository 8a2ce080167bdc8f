package sessions

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A kept session's expiry interval runs from its disconnection, not from the restart:
// the broker is given what remains of it, and a session past it (or connected when the
// process died and past it counting from the last heartbeat) is dropped at load.
func TestSessionExpiryCountsFromDisconnection(t *testing.T) {
	now := time.Now()
	s := New(zap.NewNop())
	client := func(id string, expiry uint32, connected, disconnected time.Time) {
		c := &storedClient{Client: storage.Client{ID: id, ProtocolVersion: 5,
			Properties: storage.ClientProperties{SessionExpiryInterval: expiry, SessionExpiryIntervalFlag: true}}}
		if !connected.IsZero() {
			c.Connected = connected.UnixMilli()
		}
		if !disconnected.IsZero() {
			c.Disconnected = disconnected.UnixMilli()
		}
		s.clients[id] = c
		s.putSub(storage.Subscription{Client: id, Filter: "a/#"})
	}
	client("left-3s-ago", 10, time.Time{}, now.Add(-3*time.Second))
	client("expired", 10, time.Time{}, now.Add(-11*time.Second))
	client("online-at-crash", 10, now.Add(-time.Hour), time.Time{})
	client("online-at-crash-expired", 5, now.Add(-time.Hour), time.Time{})
	v3 := &storedClient{Client: storage.Client{ID: "v3", ProtocolVersion: 4}, Disconnected: now.Add(-48 * time.Hour).UnixMilli()}
	s.clients["v3"] = v3
	lastHeartbeat := now.Add(-7 * time.Second).UnixMilli()
	if n := s.settle(lastHeartbeat, now); n != 2 {
		t.Errorf("%d sessions expired at load, want 2", n)
	}
	clients := s.Clients()
	got := map[string]uint32{}
	for _, c := range clients {
		got[c.ID] = c.Properties.SessionExpiryInterval
	}
	// left 3 s ago: 7 s left; online at the crash: disconnected a second after the last
	// heartbeat (7 s ago): 4 s left of 10.
	if len(got) != 3 || got["left-3s-ago"] != 7 || got["online-at-crash"] != 4 {
		t.Errorf("restored expiry intervals %v, want left-3s-ago 7, online-at-crash 4, v3", got)
	}
	if _, ok := got["v3"]; !ok {
		t.Error("an MQTT 3.1.1 session (no expiry interval) was dropped")
	}
	if s.subs["expired"] != nil || s.subs["online-at-crash-expired"] != nil || s.subs["left-3s-ago"] == nil {
		t.Errorf("subscriptions kept for %v", s.subs)
	}
}

// TestSessionJournalZeroFilledTail: a machine crash can leave a journal whose size
// grew but whose last pages were never written, i.e. a tail of zero bytes. Eight zero
// bytes are a well-formed journal frame (length 0, and 0 is the CRC-32C of nothing),
// so the journal hands them back as empty records; the bridge never writes those and
// must start with what was written before, not refuse every restart.
func TestSessionJournalZeroFilledTail(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.write(jsonRecord(recRetain, storage.Message{TopicName: "dev/kept", Payload: []byte("v")}))
	s.mu.Unlock()
	s.Close()
	f, err := os.OpenFile(filepath.Join(dir, JournalFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, zap.NewNop())
	if err != nil {
		t.Fatalf("restart after a zero-filled tail: %v", err)
	}
	defer s.Close()
	if m, ok := s.retained["dev/kept"]; !ok || string(m.Payload) != "v" {
		t.Fatalf("retained message lost: %+v", s.retained)
	}
}
