package handler

import "sync/atomic"

// DefaultStreamBufferBytes is the default bound of the message bytes a replica's
// StreamingPull streams hold waiting for their clients (Deps.StreamBufferBytes).
const DefaultStreamBufferBytes = 256 << 20

// holdBudget bounds the message bytes this replica's StreamingPull streams hold in
// memory between storage-core's Receive and the end of gRPC's Send. A client that
// stops reading keeps its stream's Send blocked; unbounded, each such stream would pin
// up to three 10 MiB responses. Each open stream may hold its share, limit / open
// streams; past it the stream leases nothing more from storage-core until its client
// reads. Nothing is dropped and no lease is lost: what a stream holds is sent, or
// nacked when the stream ends. storage-core answers at least one message per Receive,
// so a stream may pass its share by one message.
type holdBudget struct {
	limit   int64
	streams atomic.Int64
	held    atomic.Int64 // by every stream
}

// share is what one open stream may hold now, in bytes.
func (b *holdBudget) share() int64 { return b.limit / max(b.streams.Load(), 1) }

// HeldBytes is the message bytes this replica's streams hold, not yet sent (the gauge
// tributary_pubsub_gateway_stream_held_bytes).
func (h *Subscriber) HeldBytes() int64 { return h.budget.held.Load() }

// room is how many more bytes s may lease before its client reads; <= 0 means none.
func (s *stream) room() int64 { return s.h.budget.share() - s.held.Load() }

// hold counts n bytes leased for s and not yet sent.
func (s *stream) hold(n int64) {
	s.held.Add(n)
	s.h.budget.held.Add(n)
}

// unhold returns n bytes once they are sent (or nacked) and wakes s, which may have
// stopped pulling at its share.
func (s *stream) unhold(n int64) {
	s.held.Add(-n)
	s.h.budget.held.Add(-n)
	s.notify()
}
