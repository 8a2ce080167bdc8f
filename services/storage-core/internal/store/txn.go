package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"sync"
)

// Kafka transactions (KIP-98) in one channel. Transactional batches are stored as the
// producer sent them; the first transactional batch of a producer opens its
// transaction at that batch's base offset, and a control batch (COMMIT or ABORT
// marker, written by WriteTxnMarker) ends it. From that the log derives:
//
//   - the last stable offset (LSO): the first offset of the earliest transaction that
//     is open, or whose marker is not yet below the high watermark; the high watermark
//     when there is none. read_committed readers stop there.
//   - the aborted-transactions index: per aborted transaction its producer, first
//     offset and marker offset (Kafka's .txnindex entries), which read_committed
//     Kafka consumers get with each fetch to drop the aborted records themselves.
//
// A channel that never saw a transactional batch has no txnState (Log.txn is nil), so
// readers and writers of such channels pay one pointer load. The state is rebuilt at
// open from the producer snapshot (which carries it) plus the active segment, or from
// every retained segment without a snapshot; aborted entries wholly below the log
// start are dropped with retention and DeleteRecords.

// Control record types (Kafka ControlRecordType).
const (
	controlAbort  = 0
	controlCommit = 1
)

// abortedTxn is one entry of the aborted-transactions index: the producer, the first
// offset of its transaction, the offset of its ABORT marker and the LSO right after the
// marker (Kafka AbortedTxn; lso lets a lookup stop early, as Kafka's
// TransactionIndex.collectAbortedTxns does).
type abortedTxn struct {
	pid, first, last, lso int64
}

// AbortedTxn is an aborted transaction as Fetch reports it: producer id and the offset
// of its first record.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// endedTxn is a transaction whose marker is written but may not be durable yet: it
// still holds the LSO back until the high watermark passes its marker.
type endedTxn struct {
	first, marker int64
}

// txnState is a channel's transaction bookkeeping. Writers change it under Log.mu and
// mu; readers take mu alone (a leaf lock, LOCKS.md).
type txnState struct {
	mu        sync.Mutex
	open      map[int64]int64 // producer id -> first offset of its open transaction
	firstOpen int64           // min over open; math.MaxInt64 when none
	ended     []endedTxn      // markers written, maybe not yet below the high watermark
	aborted   []abortedTxn    // by marker offset
}

func newTxnState() *txnState {
	return &txnState{open: map[int64]int64{}, firstOpen: math.MaxInt64}
}

// txnFor returns the log's txnState, creating it. Caller holds Log.mu.
func (l *Log) txnFor() *txnState {
	t := l.txn.Load()
	if t == nil {
		t = newTxnState()
		l.txn.Store(t)
	}
	return t
}

// beginTxn opens pid's transaction at first unless one is open. Caller holds Log.mu.
func (l *Log) beginTxn(pid, first int64) {
	t := l.txnFor()
	t.mu.Lock()
	if _, ok := t.open[pid]; !ok {
		t.open[pid] = first
		t.firstOpen = min(t.firstOpen, first)
	}
	t.mu.Unlock()
}

// endTxn ends pid's open transaction with the marker at offset marker; it reports
// whether one was open. Caller holds Log.mu.
func (l *Log) endTxn(pid, marker int64, commit bool) bool {
	t := l.txn.Load()
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	first, ok := t.open[pid]
	if !ok {
		return false
	}
	delete(t.open, pid)
	if first == t.firstOpen {
		t.firstOpen = math.MaxInt64
		for _, f := range t.open {
			t.firstOpen = min(t.firstOpen, f)
		}
	}
	// Markers already below the high watermark are dropped here too, so a channel
	// nobody reads does not collect them (none is published yet at open).
	if hw := l.hw.Load(); hw != nil {
		t.pruneEnded(hw.next)
	}
	t.ended = append(t.ended, endedTxn{first: first, marker: marker})
	if !commit {
		t.aborted = append(t.aborted, abortedTxn{pid: pid, first: first, last: marker, lso: min(t.firstOpen, marker+1)})
	}
	return true
}

// openTxn returns the first offset of pid's open transaction. Caller holds Log.mu.
func (l *Log) openTxn(pid int64) (int64, bool) {
	t := l.txn.Load()
	if t == nil {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.open[pid]
	return f, ok
}

// trimTxns drops aborted entries whose marker is below start. Caller holds Log.mu.
func (l *Log) trimTxns(start int64) {
	t := l.txn.Load()
	if t == nil {
		return
	}
	t.mu.Lock()
	k := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].last >= start })
	if k > 0 {
		t.aborted = append([]abortedTxn(nil), t.aborted[k:]...)
	}
	t.mu.Unlock()
}

// LastStable is the last stable offset (Kafka LSO): the first offset of the earliest
// transaction not yet decided and durable, else the high watermark; at least the log
// start.
func (l *Log) LastStable() int64 {
	hw := l.hw.Load().next
	t := l.txn.Load()
	if t == nil {
		return hw
	}
	return max(t.lastStable(hw), min(l.logStart.Load(), hw))
}

func (t *txnState) lastStable(hw int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneEnded(hw)
	lso := min(hw, t.firstOpen)
	for _, e := range t.ended {
		lso = min(lso, e.first)
	}
	return lso
}

// pruneEnded drops the ended transactions whose marker is below hw. Caller holds mu.
func (t *txnState) pruneEnded(hw int64) {
	k := 0
	for _, e := range t.ended {
		if e.marker >= hw {
			t.ended[k] = e
			k++
		}
	}
	t.ended = t.ended[:k]
}

// AbortedTxns returns the aborted transactions overlapping [from, upper): those whose
// marker is at or after from and whose first offset is below upper, in marker order
// (Kafka UnifiedLog.collectAbortedTransactions).
func (l *Log) AbortedTxns(from, upper int64) []AbortedTxn {
	t := l.txn.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []AbortedTxn
	for i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].last >= from }); i < len(t.aborted); i++ {
		a := &t.aborted[i]
		if a.first < upper {
			out = append(out, AbortedTxn{ProducerID: a.pid, FirstOffset: a.first})
		}
		if a.lso >= upper {
			break // every later transaction started at or after this LSO
		}
	}
	return out
}

// abortedSpans returns, per producer, the [first, last) offset spans of its aborted
// transactions overlapping [from, upper), for native read_committed readers.
func (l *Log) abortedSpans(from, upper int64) map[int64][][2]int64 {
	t := l.txn.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[int64][][2]int64
	for i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].last >= from }); i < len(t.aborted); i++ {
		a := &t.aborted[i]
		if a.first < upper {
			if out == nil {
				out = map[int64][][2]int64{}
			}
			out[a.pid] = append(out[a.pid], [2]int64{a.first, a.last})
		}
		if a.lso >= upper {
			break
		}
	}
	return out
}

// abortedEntries returns copies of the aborted entries whose marker is at or after
// from and whose first offset is below upper, by first offset (the log cleaner's
// Kafka collectAbortedTransactions).
func (l *Log) abortedEntries(from, upper int64) []abortedTxn {
	t := l.txn.Load()
	if t == nil {
		return nil
	}
	t.mu.Lock()
	var out []abortedTxn
	for i := sort.Search(len(t.aborted), func(i int) bool { return t.aborted[i].last >= from }); i < len(t.aborted); i++ {
		if a := t.aborted[i]; a.first < upper {
			out = append(out, a)
		}
	}
	t.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out
}

// dropAborted removes the aborted entries drop (matched by producer and marker offset)
// from the index and from the producer snapshot of the active segment, so a restart
// does not bring them back; the log cleaner calls it once no record of those
// transactions is left, before it may remove their markers. Caller holds no lock.
func (l *Log) dropAborted(drop []abortedTxn) error {
	gone := make(map[[2]int64]bool, len(drop))
	for _, a := range drop {
		gone[[2]int64{a.pid, a.last}] = true
	}
	filter := func(t *txnState) {
		t.mu.Lock()
		k := 0
		for _, a := range t.aborted {
			if !gone[[2]int64{a.pid, a.last}] {
				t.aborted[k] = a
				k++
			}
		}
		t.aborted = t.aborted[:k]
		t.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if t := l.txn.Load(); t != nil {
		filter(t)
	}
	base := l.active.base
	ps, t, ok := readSnapshot(l.dir, base)
	if !ok || t == nil {
		return nil
	}
	filter(t)
	if err := writeFileAtomic(l.dir, snapshotName(base), encodeSnapshot(ps, t, l.logStart.Load())); err != nil {
		return fmt.Errorf("%w: rewrite producer snapshot: %v", ErrStorage, err)
	}
	return nil
}

// TxnMarker is one transaction marker to write (WriteTxnMarker).
type TxnMarker struct {
	ProducerID       int64
	ProducerEpoch    int16
	Commit           bool
	CoordinatorEpoch int32
}

// encodeMarker encodes m as a Kafka control batch (attributes transactional | control,
// base sequence -1) of one record: key int16 version 0 + int16 type, value int16
// version 0 + int32 coordinator epoch (Kafka EndTransactionMarker).
func encodeMarker(m TxnMarker, now int64) []byte {
	typ := int16(controlAbort)
	if m.Commit {
		typ = controlCommit
	}
	var key [4]byte
	binary.BigEndian.PutUint16(key[2:], uint16(typ))
	var val [6]byte
	binary.BigEndian.PutUint32(val[2:], uint32(m.CoordinatorEpoch))
	b := EncodeBatch([]NewRecord{{Timestamp: now, Key: key[:], Value: val[:]}}, now)
	binary.BigEndian.PutUint16(b[offAttributes:], attrTransactional|attrControl)
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(m.ProducerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(m.ProducerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], 0xffffffff)
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offAttributes:], castagnoli))
	return b
}

// controlInfo is what a stored control batch says.
type controlInfo struct {
	commit     bool
	coordEpoch int32
}

// parseControl reads the control record of a whole, uncompressed control batch frame;
// ok is false when it is not a well-formed transaction marker.
func parseControl(frame []byte) (controlInfo, bool) {
	if len(frame) <= batchHeaderLen || frame[offAttributes+1]&attrCompressionMask != 0 {
		return controlInfo{}, false
	}
	recs := frame[batchHeaderLen:]
	l, k := binary.Varint(recs)
	if k <= 0 || l < 1 || int64(len(recs)-k) < l {
		return controlInfo{}, false
	}
	r := recReader{b: recs[k+1 : k+int(l)]}
	_ = r.varint() // timestamp delta
	_ = r.varint() // offset delta
	key := r.bytes()
	val := r.bytes()
	if r.err != nil || len(key) < 4 || binary.BigEndian.Uint16(key) != 0 {
		return controlInfo{}, false
	}
	var ci controlInfo
	switch int16(binary.BigEndian.Uint16(key[2:])) {
	case controlAbort:
	case controlCommit:
		ci.commit = true
	default:
		return controlInfo{}, false
	}
	ci.coordEpoch = -1
	if len(val) >= 6 {
		ci.coordEpoch = int32(binary.BigEndian.Uint32(val[2:]))
	}
	return ci, true
}

// WriteTxnMarker appends m's control batch and ends the producer's open transaction,
// returning once it is durable, as AppendBatches. See BeginTxnMarker.
func (l *Log) WriteTxnMarker(m TxnMarker) (AppendResult, error) {
	return l.BeginTxnMarker(m).Wait()
}

// BeginTxnMarker is the write phase of WriteTxnMarker (as BeginAppend). A producer
// with no open transaction on the channel gets no marker: the result has Duplicate set
// (and waits only for what was written before it to be durable), so a retried marker
// is idempotent. The coordinator epoch is stored in the marker and reported by
// DescribeProducers, never checked: coordinator replicas serialize a transaction's
// decision on its Postgres row, so there are no coordinator generations to fence, and
// a native caller's marker with a high epoch must not make every later marker of the
// producer refused (which would leave its transaction in Prepare* for good). Errors: ErrInvalidProducerEpoch (epoch older than the producer's),
// ErrInvalidArgument (producer id < 0 or epoch < 0), ErrStorage, ErrNotFound,
// ErrClosed.
//
// In raft mode the marker is proposed to the channel's group and written by every
// replica when it applies the entry (raftBeginMarker), so the leader and its followers
// end the transaction at the same offset; errors are then also raft mode's
// (ErrNotLeader, ErrNoQuorum).
func (l *Log) BeginTxnMarker(m TxnMarker) *PendingAppend {
	if m.ProducerID < 0 || m.ProducerEpoch < 0 {
		return &PendingAppend{l: l, err: fmt.Errorf("%w: producer id %d epoch %d", ErrInvalidArgument, m.ProducerID, m.ProducerEpoch)}
	}
	if l.st.raft != nil {
		return l.raftBeginMarker(m)
	}
	res, target, err := l.beginTxnMarker(m, l.st.nowMs(), 0, l.logAppendTime())
	return &PendingAppend{l: l, res: res, target: target, err: err}
}

// beginTxnMarker writes m's control batch at time now (ms), with partitionLeaderEpoch
// leaderEpoch (raft mode: the term of the entry; 0 otherwise), stamped with now as
// its timestamp with logAppend (see writeLocked).
func (l *Log) beginTxnMarker(m TxnMarker, now int64, leaderEpoch uint32, logAppend bool) (AppendResult, int64, error) {
	b := encodeMarker(m, now)
	binary.BigEndian.PutUint32(b[offPartitionLeaderEpoch:], leaderEpoch)
	h := parseHeader(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return AppendResult{}, 0, l.closedErr()
	}
	if l.failed != nil {
		return AppendResult{}, 0, fmt.Errorf("%w: channel fenced after %v", ErrStorage, l.failed)
	}
	if st := l.prods[m.ProducerID]; st != nil {
		if m.ProducerEpoch < st.epoch {
			return AppendResult{}, 0, fmt.Errorf("%w: marker of producer %d epoch %d is older than %d", ErrInvalidProducerEpoch, m.ProducerID, m.ProducerEpoch, st.epoch)
		}
	}
	if _, ok := l.openTxn(m.ProducerID); !ok {
		var target int64
		if l.st.opts.FsyncInterval <= 0 {
			target = l.next
		}
		return AppendResult{BaseOffset: -1, LastOffset: -1, LogAppendTime: -1, Duplicate: true}, target, nil
	}
	return l.writeLocked(b, []batchHeader{h}, now, &controlInfo{commit: m.Commit, coordEpoch: m.CoordinatorEpoch}, logAppend)
}

// applyControl applies a written or recovered marker to the producer and transaction
// state (the producer's epoch was applied with its header). Caller holds Log.mu.
func (l *Log) applyControl(h *batchHeader, ci controlInfo) {
	if st := l.prods[h.ProducerID]; st != nil && h.ProducerEpoch >= st.epoch {
		st.coordEpoch = max(st.coordEpoch, ci.coordEpoch)
	}
	l.endTxn(h.ProducerID, h.BaseOffset, ci.commit)
}

// ProducerInfo describes one producer of a channel (DescribeProducers).
type ProducerInfo struct {
	ID    int64
	Epoch int16
	// LastSequence is the producer sequence of its last batch's last record; -1 when
	// none is kept.
	LastSequence int32
	// LastMs is the time of its last append, ms.
	LastMs int64
	// CoordinatorEpoch is that of its last marker; -1 when none.
	CoordinatorEpoch int32
	// TxnFirstOffset is the first offset of its open transaction; -1 when none.
	TxnFirstOffset int64
}

// Producers lists the channel's producer state, by producer id.
func (l *Log) Producers() []ProducerInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ProducerInfo, 0, len(l.prods))
	for pid, st := range l.prods {
		p := ProducerInfo{ID: pid, Epoch: st.epoch, LastSequence: -1, LastMs: st.lastMs, CoordinatorEpoch: st.coordEpoch, TxnFirstOffset: -1}
		if st.n > 0 {
			p.LastSequence = st.batches[st.n-1].lastSeq
		}
		if f, ok := l.openTxn(pid); ok {
			p.TxnFirstOffset = f
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// FramesEnd returns the offset after the last whole frame of b (concatenated stored
// frames, as ReadRawTo returns them); 0 for none.
func FramesEnd(b []byte) int64 {
	var end int64
	for len(b) >= batchHeaderLen {
		n, err := frameLen(b)
		if err != nil {
			break
		}
		h := parseHeader(b)
		end = h.NextOffset()
		b = b[n:]
	}
	return end
}
