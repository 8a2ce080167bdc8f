package store

import "fmt"

// maxProducerBatches is how many recent batches per producer are kept for duplicate
// detection (Kafka ProducerStateEntry.NUM_BATCHES_TO_RETAIN, the max in-flight requests
// of an idempotent producer).
const maxProducerBatches = 5

// producerExpiryMs is how long a producer's state is kept after its last append
// (Kafka producer.id.expiration.ms, 1 day).
const producerExpiryMs = 24 * 3600 * 1000

type producerBatch struct {
	firstSeq, lastSeq int32
	baseOffset        int64
}

// producerState is one idempotent producer's state in one channel: its epoch and last
// batches, oldest first. Rebuilt from batch headers on start.
type producerState struct {
	epoch      int16
	n          int
	lastMs     int64 // time of the last append (batch max timestamp when recovered)
	coordEpoch int32 // coordinator epoch of the producer's last marker; -1 none
	batches    [maxProducerBatches]producerBatch
}

func (p *producerState) push(b producerBatch) {
	if p.n == maxProducerBatches {
		copy(p.batches[:], p.batches[1:])
		p.n--
	}
	p.batches[p.n] = b
	p.n++
}

// producers maps producer id to state.
type producers map[int64]*producerState

// apply records a written (or recovered) batch appended at nowMs.
func (ps producers) apply(h *batchHeader, nowMs int64) {
	if h.ProducerID < 0 {
		return
	}
	st := ps[h.ProducerID]
	if st == nil {
		st = &producerState{epoch: h.ProducerEpoch, coordEpoch: -1}
		ps[h.ProducerID] = st
	}
	st.lastMs = max(st.lastMs, nowMs)
	if h.ProducerEpoch != st.epoch {
		if h.ProducerEpoch < st.epoch {
			return
		}
		st.epoch = h.ProducerEpoch
		st.n = 0
	}
	if h.Attributes&attrControl != 0 || h.BaseSequence < 0 {
		return
	}
	st.push(producerBatch{firstSeq: h.BaseSequence, lastSeq: h.LastSequence(), baseOffset: h.BaseOffset})
}

// prevBatch is an earlier batch of the same request, not yet applied.
type prevBatch struct {
	pid     int64
	epoch   int16
	lastSeq int32
}

// check validates h against the producer's state, following Kafka's
// ProducerAppendInfo.checkSequence: an unknown producer may start at any sequence; a
// newer epoch must start at 0; an older epoch is fenced; otherwise the batch must be a
// duplicate of one of the last 5 batches (dup is returned) or follow the last one.
// prev holds earlier batches of the same request.
func (ps producers) check(h *batchHeader, prev []prevBatch) (*producerBatch, error) {
	if h.ProducerID < 0 {
		return nil, nil
	}
	for i := len(prev) - 1; i >= 0; i-- {
		if p := prev[i]; p.pid == h.ProducerID {
			if h.ProducerEpoch != p.epoch || h.BaseSequence != incrementSequence(p.lastSeq, 1) {
				return nil, fmt.Errorf("%w: producer %d batch sequence %d does not follow %d in the same request", ErrOutOfOrderSequence, h.ProducerID, h.BaseSequence, p.lastSeq)
			}
			return nil, nil
		}
	}
	st := ps[h.ProducerID]
	if st == nil {
		return nil, nil
	}
	switch {
	case h.ProducerEpoch < st.epoch:
		return nil, fmt.Errorf("%w: producer %d epoch %d is older than %d", ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, st.epoch)
	case h.ProducerEpoch > st.epoch:
		if h.BaseSequence != 0 {
			return nil, fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, got %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil, nil
	}
	last := h.LastSequence()
	for i := 0; i < st.n; i++ {
		if b := &st.batches[i]; b.firstSeq == h.BaseSequence && b.lastSeq == last {
			dup := *b
			return &dup, nil
		}
	}
	if st.n == 0 {
		return nil, nil
	}
	if want := incrementSequence(st.batches[st.n-1].lastSeq, 1); h.BaseSequence != want {
		return nil, fmt.Errorf("%w: producer %d epoch %d sequence %d, expected %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence, want)
	}
	return nil, nil
}

// expire drops producers idle since before nowMs - producerExpiryMs, except those
// keep holds (an open transaction: Kafka never expires those).
func (ps producers) expire(nowMs int64, keep func(pid int64) bool) {
	for pid, st := range ps {
		if st.lastMs < nowMs-producerExpiryMs && !keep(pid) {
			delete(ps, pid)
		}
	}
}
