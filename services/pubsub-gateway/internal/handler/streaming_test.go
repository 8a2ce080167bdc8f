package handler

import (
	"testing"
	"time"
)

// TestStreamWindow: the flow-control book of a stream: tracked leases fill the window,
// acks and nacks through any RPC of the replica (streamBook.done) free it, deadline
// extensions keep leases in it, expired leases leave it.
func TestStreamWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	h := New(Deps{Now: func() time.Time { return now }})
	s := &stream{h: h, maxMsgs: 3, maxBytes: 100, outstanding: map[string]lease{}, wake: make(chan struct{}, 1)}
	if msgs, bytes, full := s.window(now); full || msgs != 3 || bytes != 100 {
		t.Fatalf("empty window = %d, %d, %v", msgs, bytes, full)
	}
	s.track("a", 10, now.Add(10*time.Second))
	s.track("b", 10, now.Add(10*time.Second))
	if msgs, bytes, _ := s.window(now); msgs != 1 || bytes != 80 {
		t.Fatalf("window with two leases = %d, %d", msgs, bytes)
	}
	s.track("c", 10, now.Add(10*time.Second))
	if _, _, full := s.window(now); !full {
		t.Fatal("window not full at max_outstanding_messages")
	}
	h.streams.done([]string{"a", "unknown"})
	select {
	case <-s.wake:
	default:
		t.Fatal("an ack did not wake the stream")
	}
	if msgs, _, full := s.window(now); full || msgs != 1 {
		t.Fatalf("after an ack: %d, %v", msgs, full)
	}
	h.streams.extend([]string{"b"}, now.Add(time.Minute))
	later := now.Add(20 * time.Second)
	if msgs, _, _ := s.window(later); msgs != 2 {
		t.Fatalf("after c expired and b was extended: %d free, want 2", msgs)
	}
	if _, ok := h.streams.byID["c"]; ok {
		t.Fatal("expired lease still in the replica's book")
	}
	s.track("big", 200, later.Add(time.Minute))
	if _, _, full := s.window(later); !full {
		t.Fatal("window not full at max_outstanding_bytes")
	}
	h.streams.drop(s)
	if len(h.streams.byID) != 0 {
		t.Fatalf("book after drop: %v", h.streams.byID)
	}
}
