package queue

// snapshot is a queue's acknowledgement state at one moment (bucket "snapshots").
// Every offset below Floor is acked; in [Floor, End) the offsets in Unacked are not;
// at and after End, those in AckedAhead are acked.
type snapshot struct {
	Queue       string  `json:"queue"`
	Incarnation uint64  `json:"incarnation"`
	CreatedMs   int64   `json:"created_ms"`
	Floor       int64   `json:"floor"`
	End         int64   `json:"end"`
	Unacked     []int64 `json:"unacked,omitempty"`
	AckedAhead  []int64 `json:"acked_ahead,omitempty"`
}
