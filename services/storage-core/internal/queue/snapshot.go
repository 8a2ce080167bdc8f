package queue

// snapshot is a queue's acknowledgement state at one moment (bucket "snapshots").
// Every offset below Floor is acked; in [Floor, End) the offsets in Unacked are not;
// at and after End, those in the AckedAhead spans are acked.
type snapshot struct {
	Queue       string  `json:"queue"`
	Incarnation uint64  `json:"incarnation"`
	CreatedMs   int64   `json:"created_ms"`
	Floor       int64   `json:"floor"`
	End         int64   `json:"end"`
	Unacked     []int64 `json:"unacked,omitempty"`
	AckedAhead  []span  `json:"acked_ahead,omitempty"`
	// Sources describes the same state by source sequences, for seeking another queue
	// bound to the same sources: per source, the binding's cursor and the source
	// sequences of the messages unacked then.
	Sources map[string]*snapSource `json:"sources,omitempty"`
}

// snapSource is one source's part of a snapshot: source sequences below Cursor were
// acked unless in the Unacked spans; from Cursor on, nothing was seen yet. (A backlog
// not yet read is mostly contiguous, so spans keep a large one small.)
type snapSource struct {
	Cursor  int64 `json:"cursor"`
	Unacked spans `json:"unacked,omitempty"`
	// CreatedMs is the source log's creation time (0 in snapshots taken before it was
	// recorded): a log deleted and created again under the same name is another
	// source, whose sequences mean other records.
	CreatedMs int64 `json:"created_ms,omitempty"`
}

// sameSource reports whether a binding created on a source log created at createdMs
// reads the log this part of a snapshot describes (0 on either side: not recorded).
func (s *snapSource) sameSource(createdMs int64) bool {
	return s.CreatedMs == 0 || createdMs == 0 || s.CreatedMs == createdMs
}

// unacked reports whether the source record seq was unacked in the snapshot.
func (s *snapSource) unacked(seq int64) bool {
	if seq >= s.Cursor {
		return true
	}
	return s.Unacked.contains(seq)
}
