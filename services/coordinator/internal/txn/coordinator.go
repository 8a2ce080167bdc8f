// Package txn is the Kafka transaction coordinator (KIP-98, with Kafka 4.x's error
// codes per state): per transactional id the producer id and epoch, the state, the
// partitions and groups of the current transaction, its timeout and start, kept in
// Postgres (migration 00300, package store) under the row's lock, so any coordinator
// replica serves any transactional id.
//
// State machine (Kafka's TransactionMetadata): Empty -AddPartitions/AddOffsets->
// Ongoing -EndTxn-> PrepareCommit | PrepareAbort -markers written-> CompleteCommit |
// CompleteAbort -AddPartitions-> Ongoing ...; InitProducerId bumps the epoch (fencing
// the previous producer) from Empty and Complete*, and aborts an Ongoing transaction
// first. The decision (Prepare*) is committed to Postgres before the first marker is
// written (and before EndTxn answers); the markers and the Complete* transition then
// happen under the row lock, so one finisher at a time writes them and a restarted coordinator (the next call that
// meets the row, or the sweep) finishes them. Markers are idempotent in storage-core.
package txn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Kafka state names, as stored and as DescribeTransactions reports them.
const (
	StateEmpty          = "Empty"
	StateOngoing        = "Ongoing"
	StatePrepareCommit  = "PrepareCommit"
	StatePrepareAbort   = "PrepareAbort"
	StateCompleteCommit = "CompleteCommit"
	StateCompleteAbort  = "CompleteAbort"
	StateDead           = "Dead"
)

// Kafka error codes (Errors.java) answered here.
const (
	codeUnknownServerError       = -1
	codeNone                     = 0
	codeUnknownTopicOrPartition  = 3
	codeNotLeaderOrFollower      = 6
	codeOffsetMetadataTooLarge   = 12
	codeNotEnoughReplicas        = 19
	codeIllegalGeneration        = 22
	codeInvalidGroupID           = 24
	codeUnknownMemberID          = 25
	codeInvalidRequest           = 42
	codeInvalidProducerEpoch     = 47
	codeInvalidTxnState          = 48
	codeInvalidProducerIDMapping = 49
	codeInvalidTxnTimeout        = 50
	codeConcurrentTransactions   = 51
	codeOperationNotAttempted    = 55
	codeFencedInstanceID         = 82
	codeProducerFenced           = 90
)

// SweepLock is the sweep-lock key (NATS JetStream KV) whose holder runs Sweep.
const SweepLock = "transactions"

// Defaults.
const (
	// DefaultMaxTimeout is Kafka's transaction.max.timeout.ms (15 minutes).
	DefaultMaxTimeout = 15 * time.Minute
	// DefaultIDExpiration is Kafka's transactional.id.expiration.ms (7 days).
	DefaultIDExpiration = 7 * 24 * time.Hour
	// expireEvery is how often the sweep deletes expired transactional ids.
	expireEvery = time.Minute
	// maxMetadataSize is Kafka's offset.metadata.max.bytes.
	maxMetadataSize = 4096
	// MaxTransactionalIDBytes is the longest transactional id InitProducerId stores.
	// Kafka has no limit of its own but the size of the id's state record in
	// __transaction_state, which fails as UNKNOWN_SERVER_ERROR when too large
	// (TransactionStateManager.appendTransactionToLog); here the id is a Postgres
	// btree key (at most about 2.7 KB per index row, shared with the topic or group
	// of transaction_partitions and transaction_offsets), so a longer id could never
	// be stored and would fail the same way on every retry.
	MaxTransactionalIDBytes = 1024
	// markerTimeout bounds one WriteMarkers call.
	markerTimeout = 30 * time.Second
	// coordCallTimeout bounds one batch of adds (its Postgres round trip).
	coordCallTimeout = markerTimeout
	// finishTimeout bounds a finish left running after EndTxn's answer (its Postgres
	// calls and markers); one cut short is redone by the next call or the sweep.
	finishTimeout = 2 * markerTimeout
)

// Marker is one COMMIT or ABORT control record to write into a partition's log.
type Marker struct {
	Topic         string
	Partition     int32
	ProducerID    int64
	ProducerEpoch int32
	Commit        bool
}

// MarkerWriter writes transaction markers (storage-core's WriteTxnMarkers). It returns
// one Kafka error code per marker, in order (0 written or nothing to write); an error
// means none is known to be written. Writing a marker twice must be harmless.
type MarkerWriter interface {
	WriteMarkers(ctx context.Context, markers []Marker) ([]int16, error)
}

// Config tunes the coordinator.
type Config struct {
	// MaxTimeout is transaction.max.timeout.ms: InitProducerId with a larger
	// transaction timeout is INVALID_TRANSACTION_TIMEOUT. 0 = DefaultMaxTimeout.
	MaxTimeout time.Duration
	// IDExpiration is transactional.id.expiration.ms: an id without an open
	// transaction, unused for this long, is deleted by the sweep (a producer still using
	// it gets INVALID_PRODUCER_ID_MAPPING). 0 = DefaultIDExpiration.
	IDExpiration time.Duration
}

// Deps are the coordinator's collaborators.
type Deps struct {
	Store   *store.Store
	Markers MarkerWriter
	// NextProducerID hands out a fresh producer id (the idempotent producers' blocks).
	NextProducerID func(ctx context.Context) (int64, error)
	Log            *zap.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Coordinator serves the transaction APIs. Safe for concurrent use; every call is a
// Postgres transaction on the transactional id's row.
type Coordinator struct {
	cfg     Config
	store   *store.Store
	markers MarkerWriter
	nextPID func(ctx context.Context) (int64, error)
	log     *zap.Logger
	now     func() time.Time

	expireMu   sync.Mutex // guards lastExpire
	lastExpire time.Time  // last expiry pass of Sweep
	// bg counts the finishes EndTxn left running after its answer.
	bg sync.WaitGroup

	fmu       sync.Mutex               // guards the fields below (finishbatch.go)
	fqueue    []*finishReq             // finishes waiting for a runner
	frunners  int                      // runFinishes running
	finishing map[string]chan struct{} // transactional id -> done of its running finish

	amu      sync.Mutex // guards the fields below (addbatch.go)
	aqueue   []*addReq  // adds waiting for a runner
	arunners int        // runAdds running
}

// Close waits for the finishes EndTxn left running after answering (each bounded by
// finishTimeout; one cut short by a crash is redone from the durable Prepare*).
func (c *Coordinator) Close() { c.bg.Wait() }

// New returns a Coordinator.
func New(cfg Config, deps Deps) *Coordinator {
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = DefaultMaxTimeout
	}
	if cfg.IDExpiration <= 0 {
		cfg.IDExpiration = DefaultIDExpiration
	}
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Coordinator{cfg: cfg, store: deps.Store, markers: deps.Markers, nextPID: deps.NextProducerID, log: log, now: now}
}

// storable reports whether Postgres can store s as text: valid UTF-8 without a NUL
// byte. A transactional id (or topic) that is not can never have been stored, so it
// names no transaction (no topic); sent into a batch's one statement it would fail
// every other producer's member of the batch with it.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// errDone ends an InTx callback without committing anything (the answer is known).
var errDone = errors.New("answered without a change")

// inTx runs fn under the store's transaction; errDone rolls back without an error.
func (c *Coordinator) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	err := c.store.InTx(ctx, fn)
	if errors.Is(err, errDone) {
		return nil
	}
	return err
}

// errNeedPID ends an inTxPID callback that needs a fresh producer id it was not given.
var errNeedPID = errors.New("needs a fresh producer id")

// inTxPID is inTx for a callback that may need a fresh producer id: freshPID returns
// one allocated before the transaction began, or errNeedPID, on which the transaction
// is rolled back, an id is allocated and fn runs again (so fn must set its results
// afresh on each run). The allocation may reserve a block in Postgres through the
// pool, so it must not run while this transaction holds a pooled connection: with every
// connection held by such a transaction, none would be left for the reservation (16
// producers starting at once waited out their gateway's 10 s timeout that way).
func (c *Coordinator) inTxPID(ctx context.Context, fn func(tx pgx.Tx, freshPID func() (int64, error)) error) error {
	spare := int64(-1)
	for {
		err := c.inTx(ctx, func(tx pgx.Tx) error {
			return fn(tx, func() (int64, error) {
				if spare < 0 {
					return 0, errNeedPID
				}
				id := spare
				spare = -1
				return id, nil
			})
		})
		if !errors.Is(err, errNeedPID) {
			return err
		}
		if spare, err = c.nextPID(ctx); err != nil {
			return err
		}
	}
}

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted.
func epochExhausted(epoch int32) bool { return epoch >= math.MaxInt16-1 }

// InitProducerID serves InitProducerId for a transactional id (non-empty). timeoutMs
// must be in 1..MaxTimeout (INVALID_TRANSACTION_TIMEOUT); an id longer than
// MaxTransactionalIDBytes is UNKNOWN_SERVER_ERROR (nothing stored; a client does not
// retry it). expPID/expEpoch are the KIP-360 producer id and epoch the producer has (-1 when new). It returns a Kafka
// error code and the producer id and epoch to use:
//   - a new id gets a fresh producer id, epoch 0;
//   - Empty / Complete*: the epoch is bumped (a fresh producer id once it is
//     exhausted), fencing the previous producer; with expPID set, a producer other
//     than the current one is PRODUCER_FENCED, and a retry of the last bump (the
//     previous id and epoch) gets the current id and epoch unchanged;
//   - Ongoing: the transaction is aborted with the epoch bumped (fencing the producer
//     that opened it) and CONCURRENT_TRANSACTIONS answered, so the client retries;
//   - Prepare*: the markers are finished and CONCURRENT_TRANSACTIONS answered.
func (c *Coordinator) InitProducerID(ctx context.Context, tid string, timeoutMs int32, expPID int64, expEpoch int32) (code int16, pid int64, epoch int32, err error) {
	if tid == "" {
		return codeInvalidRequest, -1, -1, nil
	}
	if len(tid) > MaxTransactionalIDBytes || !storable(tid) {
		return codeUnknownServerError, -1, -1, nil
	}
	if timeoutMs <= 0 || time.Duration(timeoutMs)*time.Millisecond > c.cfg.MaxTimeout {
		return codeInvalidTxnTimeout, -1, -1, nil
	}
	c.waitFinish(ctx, tid)
	finish := false
	err = c.inTxPID(ctx, func(tx pgx.Tx, freshPID func() (int64, error)) error {
		code, pid, epoch, finish = codeNone, -1, -1, false
		now := c.now()
		t, err := store.LockTxn(ctx, tx, tid)
		if errors.Is(err, store.ErrTxnNotFound) {
			id, err := freshPID()
			if err != nil {
				return err
			}
			t = &store.Txn{ID: tid, ProducerID: id, ProducerEpoch: 0, LastProducerID: -1, LastProducerEpoch: -1,
				State: StateEmpty, TimeoutMs: timeoutMs}
			created, err := store.CreateTxn(ctx, tx, t, now)
			if err != nil || created {
				pid, epoch = t.ProducerID, t.ProducerEpoch
				return err
			}
			// A concurrent call created the id since it was read: go on from its row,
			// as for a known id (an upsert here would hand out a second producer at
			// epoch 0 and overwrite the other's row, partitions of an open
			// transaction included).
			if t, err = store.LockTxn(ctx, tx, tid); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		switch t.State {
		case StatePrepareCommit, StatePrepareAbort:
			code, finish = codeConcurrentTransactions, true
			return errDone
		case StateOngoing:
			// Kafka: fence the producer of the open transaction and abort it; the
			// client's retry then bumps again from CompleteAbort.
			if t.ProducerEpoch < math.MaxInt16 {
				t.ProducerEpoch++
			}
			t.State = StatePrepareAbort
			code, finish = codeConcurrentTransactions, true
			return store.SaveTxn(ctx, tx, t, now)
		}
		if expPID >= 0 {
			switch {
			case expPID == t.LastProducerID && expEpoch == t.LastProducerEpoch:
				// A retry of the bump that answered (t.ProducerID, t.ProducerEpoch).
				pid, epoch = t.ProducerID, t.ProducerEpoch
				return errDone
			case expPID != t.ProducerID || expEpoch != t.ProducerEpoch:
				code = codeProducerFenced
				return errDone
			}
		}
		t.LastProducerID, t.LastProducerEpoch = t.ProducerID, t.ProducerEpoch
		if epochExhausted(t.ProducerEpoch) {
			id, err := freshPID()
			if err != nil {
				return err
			}
			t.ProducerID, t.ProducerEpoch = id, 0
		} else {
			t.ProducerEpoch++
		}
		t.State, t.TimeoutMs, t.StartedAt = StateEmpty, timeoutMs, time.Time{}
		if err := store.ClearTxn(ctx, tx, tid, false, true); err != nil {
			return err
		}
		pid, epoch = t.ProducerID, t.ProducerEpoch
		return store.SaveTxn(ctx, tx, t, now)
	})
	if err != nil {
		return 0, -1, -1, err
	}
	if finish {
		if _, err := c.finish(ctx, tid); err != nil {
			c.log.Warn("could not finish transaction markers", zap.String("transactional_id", tid), zap.Error(err))
		}
		return code, -1, -1, nil
	}
	return code, pid, epoch, nil
}

// producerCode checks a request's producer id and epoch against the row: 0 when they
// are the current ones, INVALID_PRODUCER_ID_MAPPING for another producer id,
// PRODUCER_FENCED for another epoch.
func producerCode(t *store.Txn, pid int64, epoch int32) int16 {
	switch {
	case t.ProducerID != pid:
		return codeInvalidProducerIDMapping
	case t.ProducerEpoch != epoch:
		return codeProducerFenced
	}
	return codeNone
}

// finish writes the markers of a Prepare* transaction and completes it, under the
// row lock (one finisher at a time). It returns the state found or reached; a state
// other than Prepare* is left as it is.
func (c *Coordinator) finish(ctx context.Context, tid string) (string, error) {
	return c.finishLocked(ctx, tid, nil)
}

// finishLocked is finish, calling locked (when not nil) once it holds the row lock.
func (c *Coordinator) finishLocked(ctx context.Context, tid string, locked func()) (string, error) {
	state := ""
	// The completion is redone from the durable Prepare* after a crash (markers are
	// idempotent, the offsets copy is an upsert of the same rows), so FinishTxn's commit
	// need not wait for its own WAL flush.
	err := c.store.FinishTxn(ctx, tid, c.now, func(t *store.Txn) (bool, bool, error) {
		if locked != nil {
			locked()
		}
		state = t.State
		if t.State != StatePrepareCommit && t.State != StatePrepareAbort {
			return false, false, nil
		}
		commit := t.State == StatePrepareCommit
		if markers := markersOf(t); len(markers) > 0 {
			mctx, cancel := context.WithTimeout(ctx, markerTimeout)
			codes, err := c.markers.WriteMarkers(mctx, markers)
			cancel()
			if err != nil {
				return false, false, fmt.Errorf("%w: %v", ErrMarkers, err)
			}
			if err := c.checkMarkerCodes(tid, markers, codes); err != nil {
				return false, false, err
			}
		}
		complete(t)
		state = t.State
		return true, commit, nil
	})
	return state, err
}

// markersOf returns the markers of t's Prepare* transaction, one per partition.
func markersOf(t *store.Txn) []Marker {
	commit := t.State == StatePrepareCommit
	markers := make([]Marker, len(t.Partitions))
	for i, p := range t.Partitions {
		markers[i] = Marker{Topic: p.Topic, Partition: p.Partition, ProducerID: t.ProducerID,
			ProducerEpoch: t.ProducerEpoch, Commit: commit}
	}
	return markers
}

// checkMarkerCodes checks the codes WriteMarkers answered for tid's markers: nil when
// every marker is written or needs none.
func (c *Coordinator) checkMarkerCodes(tid string, markers []Marker, codes []int16) error {
	if len(codes) != len(markers) {
		return fmt.Errorf("%w: %d codes for %d markers", ErrMarkers, len(codes), len(markers))
	}
	for i, code := range codes {
		switch code {
		case codeNone:
		case codeUnknownTopicOrPartition:
			// The partition is gone (topic deleted): nothing to mark. In raft
			// mode only the metadata group's leader answers this, after
			// confirming it, never a replica lagging behind the create.
		case codeInvalidProducerEpoch:
			// The log knows a newer epoch of the producer: a later marker was
			// written already, so this transaction ended there.
			c.log.Warn("transaction marker older than the log's producer epoch",
				zap.String("transactional_id", tid), zap.String("topic", markers[i].Topic),
				zap.Int32("partition", markers[i].Partition))
		default:
			return fmt.Errorf("%w: %s-%d: kafka error %d", ErrMarkers, markers[i].Topic, markers[i].Partition, code)
		}
	}
	return nil
}

// complete moves t from Prepare* (its markers written) to Complete*.
func complete(t *store.Txn) {
	commit := t.State == StatePrepareCommit
	t.State, t.StartedAt = StateCompleteAbort, time.Time{}
	if commit {
		t.State = StateCompleteCommit
	}
	if t.NextProducerID >= 0 {
		// Kafka's prepareComplete after an exhausted epoch: the producer goes on
		// with the new producer id (Last* keep the id and epoch it ended with, so a
		// retried end is recognised).
		t.ProducerID, t.ProducerEpoch, t.NextProducerID = t.NextProducerID, 0, -1
	}
}

// Partitions is the request of one transaction in AddPartitionsToTxn.
type Partitions struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int32
	VerifyOnly      bool
	Topics          []store.TxnPartition
}

// AddPartitions adds partitions to a transaction (or, with VerifyOnly, checks that
// they are in its Ongoing transaction) and returns one Kafka code per partition, in
// order. Unknown topics or partitions are UNKNOWN_TOPIC_OR_PARTITION and the others
// OPERATION_NOT_ATTEMPTED (nothing is added). Otherwise every partition gets the
// transaction's code: INVALID_PRODUCER_ID_MAPPING (no such id, or another producer
// id), PRODUCER_FENCED (another epoch), CONCURRENT_TRANSACTIONS (Prepare*: retriable),
// INVALID_TXN_STATE (Dead; verify-only: not Ongoing or not added).
func (c *Coordinator) AddPartitions(ctx context.Context, req Partitions) ([]int16, error) {
	codes := make([]int16, len(req.Topics))
	fill := func(code int16) []int16 {
		for i := range codes {
			codes[i] = code
		}
		return codes
	}
	if req.TransactionalID == "" {
		return fill(codeInvalidRequest), nil
	}
	if !storable(req.TransactionalID) {
		return fill(codeInvalidProducerIDMapping), nil
	}
	if !req.VerifyOnly {
		if bad := unstorableTopics(req.Topics); bad != nil {
			// No such topic (and one the add batch cannot take).
			for i := range req.Topics {
				codes[i] = codeOperationNotAttempted
				if bad[i] {
					codes[i] = codeUnknownTopicOrPartition
				}
			}
			return codes, nil
		}
		c.waitFinish(ctx, req.TransactionalID)
		// The common case (known partitions, the current producer, a transaction that
		// can take them) in one statement, batched with concurrent adds (addbatch.go);
		// one the batch skipped (a row locked elsewhere) alone, its statement waiting
		// for the lock; otherwise the locked path below answers.
		res, err := c.quickAddBatched(ctx, store.TxnAdd{ID: req.TransactionalID, ProducerID: req.ProducerID,
			ProducerEpoch: req.ProducerEpoch, Partitions: req.Topics})
		if err != nil {
			return nil, err
		}
		added := res.Added
		if !added && res.Skipped {
			if added, err = c.store.QuickAddTxnPartitions(ctx, req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Topics, c.now()); err != nil {
				return nil, err
			}
		}
		if added {
			return fill(codeNone), nil
		}
		bad, err := c.unknownPartitions(ctx, req.Topics)
		if err != nil {
			return nil, err
		}
		if len(bad) > 0 {
			for i := range req.Topics {
				codes[i] = codeOperationNotAttempted
				if bad[i] {
					codes[i] = codeUnknownTopicOrPartition
				}
			}
			return codes, nil
		}
	}
	if req.VerifyOnly {
		return c.verifyPartitions(ctx, req, codes)
	}
	finish := false
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		t, err := store.LockTxn(ctx, tx, req.TransactionalID)
		if errors.Is(err, store.ErrTxnNotFound) {
			fill(codeInvalidProducerIDMapping)
			return errDone
		}
		if err != nil {
			return err
		}
		if code := producerCode(t, req.ProducerID, req.ProducerEpoch); code != codeNone {
			fill(code)
			return errDone
		}
		switch t.State {
		case StatePrepareCommit, StatePrepareAbort:
			fill(codeConcurrentTransactions)
			finish = true
			return errDone
		case StateDead:
			fill(codeInvalidTxnState)
			return errDone
		}
		fill(codeNone)
		if t.State == StateOngoing && containsAll(t.Partitions, req.Topics) {
			return errDone // already in the transaction: nothing to write
		}
		if err := store.AddTxnPartitions(ctx, tx, t.ID, req.Topics); err != nil {
			return err
		}
		return c.begin(ctx, tx, t)
	})
	if err != nil {
		return nil, err
	}
	if finish {
		c.finishQuietly(ctx, req.TransactionalID)
	}
	return codes, nil
}

// verifyPartitions is AddPartitions with VerifyOnly (one per transactional produce).
// It changes nothing, so it reads the last committed state without the row lock or a
// transaction: that shows Prepare* as soon as EndTxn's decision is committed, as a
// locked read would, and a produce verified just before the decision is ordered
// before it either way.
func (c *Coordinator) verifyPartitions(ctx context.Context, req Partitions, codes []int16) ([]int16, error) {
	t, err := c.store.ReadTxn(ctx, req.TransactionalID)
	code := int16(codeNone)
	switch {
	case errors.Is(err, store.ErrTxnNotFound):
		code = codeInvalidProducerIDMapping
	case err != nil:
		return nil, err
	default:
		code = producerCode(t, req.ProducerID, req.ProducerEpoch)
	}
	if code != codeNone {
		for i := range codes {
			codes[i] = code
		}
		return codes, nil
	}
	in := make(map[store.TxnPartition]bool, len(t.Partitions))
	for _, p := range t.Partitions {
		in[p] = true
	}
	for i, p := range req.Topics {
		codes[i] = codeNone
		if t.State != StateOngoing || !in[p] {
			codes[i] = codeInvalidTxnState
		}
	}
	return codes, nil
}

// containsAll reports whether every partition of want is in have.
func containsAll(have, want []store.TxnPartition) bool {
	in := make(map[store.TxnPartition]bool, len(have))
	for _, p := range have {
		in[p] = true
	}
	for _, p := range want {
		if !in[p] {
			return false
		}
	}
	return true
}

// begin makes t Ongoing (a transaction starts now unless one is open) and saves it.
func (c *Coordinator) begin(ctx context.Context, tx pgx.Tx, t *store.Txn) error {
	now := c.now()
	if t.State != StateOngoing {
		t.State, t.StartedAt = StateOngoing, now
	}
	return store.SaveTxn(ctx, tx, t, now)
}

func (c *Coordinator) finishQuietly(ctx context.Context, tid string) {
	if _, err := c.finish(ctx, tid); err != nil {
		c.log.Warn("could not finish transaction markers", zap.String("transactional_id", tid), zap.Error(err))
	}
}

// unstorableTopics marks the partitions whose topic name Postgres cannot store (nil
// when there is none).
func unstorableTopics(parts []store.TxnPartition) map[int]bool {
	var bad map[int]bool
	for i, p := range parts {
		if !storable(p.Topic) {
			if bad == nil {
				bad = map[int]bool{}
			}
			bad[i] = true
		}
	}
	return bad
}

// unknownPartitions marks the partitions whose topic is not registered or that are
// beyond the topic's partition count (nil when all exist).
func (c *Coordinator) unknownPartitions(ctx context.Context, parts []store.TxnPartition) (map[int]bool, error) {
	names := make([]string, 0, len(parts))
	seen := map[string]bool{}
	for _, p := range parts {
		if !seen[p.Topic] {
			seen[p.Topic] = true
			names = append(names, p.Topic)
		}
	}
	topics, err := c.store.Topics(ctx, names)
	if err != nil {
		return nil, err
	}
	var bad map[int]bool
	for i, p := range parts {
		t := topics[p.Topic]
		if t == nil || p.Partition < 0 || p.Partition >= t.Partitions {
			if bad == nil {
				bad = map[int]bool{}
			}
			bad[i] = true
		}
	}
	return bad, nil
}

// AddOffsets adds a consumer group to a transaction (AddOffsetsToTxn). Codes as
// AddPartitions; an empty group id is INVALID_GROUP_ID.
func (c *Coordinator) AddOffsets(ctx context.Context, tid string, pid int64, epoch int32, group string) (int16, error) {
	if tid == "" {
		return codeInvalidRequest, nil
	}
	if group == "" {
		return codeInvalidGroupID, nil
	}
	if !storable(tid) {
		return codeInvalidProducerIDMapping, nil
	}
	c.waitFinish(ctx, tid)
	code, finish := int16(codeNone), false
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		t, err := store.LockTxn(ctx, tx, tid)
		if errors.Is(err, store.ErrTxnNotFound) {
			code = codeInvalidProducerIDMapping
			return errDone
		}
		if err != nil {
			return err
		}
		if code = producerCode(t, pid, epoch); code != codeNone {
			return errDone
		}
		switch t.State {
		case StatePrepareCommit, StatePrepareAbort:
			code, finish = codeConcurrentTransactions, true
			return errDone
		case StateDead:
			code = codeInvalidTxnState
			return errDone
		}
		if err := store.AddTxnGroup(ctx, tx, tid, group); err != nil {
			return err
		}
		return c.begin(ctx, tx, t)
	})
	if err != nil {
		return 0, err
	}
	if finish {
		c.finishQuietly(ctx, tid)
	}
	return code, nil
}

// EndTxn commits or aborts the Ongoing transaction (Kafka's endTransaction): the
// decision is stored (Prepare*, a synchronous commit) and answered; the markers and
// Complete* follow in the background under the row lock, taken before the answer, so
// the producer's next call waits for them (a transaction with consumer groups, or a
// retried EndTxn, is finished before the answer). Codes: INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED as
// AddPartitions; a retry of the decision already taken is answered NONE (once its
// markers are written; CONCURRENT_TRANSACTIONS while they cannot be); the other
// decision, or no transaction (Empty), is INVALID_TXN_STATE. When the markers cannot
// be written right after the decision, the answer is still NONE: the decision is
// durable and the markers are finished by the next call meeting the transaction or by
// the sweep (in the meantime the transaction answers CONCURRENT_TRANSACTIONS).
//
// With bump (KIP-890 transactions v2, Kafka EndTxn v5) the end bumps the epoch: the
// markers carry the bumped epoch, which is returned (newPID, newEpoch) and which the
// producer uses from then on; a retry with the epoch before the bump (the previous
// answer was lost) is recognised as the same end and answered as the first. At an
// exhausted epoch (Kafka's isEpochExhausted: 32766 and up) the end moves the id to a
// fresh producer id: the markers carry the old producer id at the bumped epoch (at
// most 32767), the answer the new producer id at epoch 0, which the row takes once the
// markers are written (Kafka's nextProducerId); the old producer id is then
// INVALID_PRODUCER_ID_MAPPING. Without bump, newPID and newEpoch are pid and epoch.
func (c *Coordinator) EndTxn(ctx context.Context, tid string, pid int64, epoch int32, commit, bump bool) (code int16, newPID int64, newEpoch int32, err error) {
	if tid == "" {
		return codeInvalidRequest, -1, -1, nil
	}
	if !storable(tid) {
		// No such id; kept out of the decision batch, whose one statement it would
		// fail for every EndTxn in it.
		return codeInvalidProducerIDMapping, -1, -1, nil
	}
	newPID, newEpoch = pid, epoch
	finish, retry, groups := false, false, false
	code = codeNone
	prepare, complete := StatePrepareAbort, StateCompleteAbort
	if commit {
		prepare, complete = StatePrepareCommit, StateCompleteCommit
	}
	c.waitFinish(ctx, tid)
	// The common case (the current producer ends its Ongoing transaction, no consumer
	// groups, no exhausted epoch) is decided by the finish batches, several EndTxns in
	// one statement and one synchronous commit, in the round trip that locks their
	// rows for the finish; otherwise the locked path below.
	d, err := c.decideAndFinish(ctx, store.Decision{ID: tid, ProducerID: pid, ProducerEpoch: epoch, Prepare: prepare, Bump: bump})
	if err != nil {
		return 0, -1, -1, err
	}
	if d.OK {
		return codeNone, d.ProducerID, d.ProducerEpoch, nil
	}
	err = c.inTxPID(ctx, func(tx pgx.Tx, freshPID func() (int64, error)) error {
		newPID, newEpoch, finish, retry, groups, code = pid, epoch, false, false, false, codeNone
		t, err := store.LockTxn(ctx, tx, tid)
		if errors.Is(err, store.ErrTxnNotFound) {
			code = codeInvalidProducerIDMapping
			return errDone
		}
		if err != nil {
			return err
		}
		if bump && pid == t.ProducerID && epoch == t.LastProducerEpoch && t.State == prepare &&
			(epoch+1 == t.ProducerEpoch || t.NextProducerID >= 0) {
			// A retried v5 EndTxn: this end already bumped the epoch (or took the
			// next producer id), its markers are not all written yet.
			newPID, newEpoch, finish, retry = t.ProducerID, t.ProducerEpoch, true, true
			if t.NextProducerID >= 0 {
				newPID, newEpoch = t.NextProducerID, 0
			}
			return errDone
		}
		if bump && t.State == complete && epoch == t.LastProducerEpoch &&
			((pid == t.ProducerID && epoch+1 == t.ProducerEpoch) ||
				(pid == t.LastProducerID && pid != t.ProducerID && t.ProducerEpoch == 0)) {
			// A retried v5 EndTxn of the ended transaction (the second case moved the
			// id to the current producer id).
			newPID, newEpoch = t.ProducerID, t.ProducerEpoch
			return errDone
		}
		if code = producerCode(t, pid, epoch); code != codeNone {
			return errDone
		}
		switch t.State {
		case StateOngoing:
			t.State, finish, groups = prepare, true, len(t.Groups) > 0
			if bump {
				t.LastProducerID, t.LastProducerEpoch = t.ProducerID, t.ProducerEpoch
				if epochExhausted(t.ProducerEpoch) {
					id, err := freshPID()
					if err != nil {
						return err
					}
					t.NextProducerID = id
				}
				if t.ProducerEpoch < math.MaxInt16 {
					t.ProducerEpoch++
				}
			}
			newPID, newEpoch = t.ProducerID, t.ProducerEpoch
			if t.NextProducerID >= 0 {
				newPID, newEpoch = t.NextProducerID, 0
			}
			return store.SaveTxn(ctx, tx, t, c.now())
		case prepare:
			finish, retry = true, true
			return errDone
		case complete:
			return errDone
		default:
			code = codeInvalidTxnState
			return errDone
		}
	})
	if err != nil {
		return 0, -1, -1, err
	}
	if !finish {
		return code, newPID, newEpoch, nil
	}
	if !retry && !groups {
		// The decision is durable: the markers and Complete* follow the answer. A
		// transaction with staged offsets finishes first, so that an OffsetFetch after
		// the commit (without require_stable) already sees its offsets.
		c.finishAfterAnswer(ctx, tid)
		return codeNone, newPID, newEpoch, nil
	}
	state, err := c.finish(ctx, tid)
	if err != nil {
		c.log.Warn("could not finish transaction markers", zap.String("transactional_id", tid), zap.Error(err))
		if retry {
			return codeConcurrentTransactions, newPID, newEpoch, nil
		}
		return codeNone, newPID, newEpoch, nil
	}
	if state != complete && retry {
		return codeConcurrentTransactions, newPID, newEpoch, nil
	}
	return codeNone, newPID, newEpoch, nil
}

// OffsetCommit is a TxnOffsetCommit request.
type OffsetCommit struct {
	TransactionalID string
	Group           string
	ProducerID      int64
	ProducerEpoch   int32
	// -1 / "" / nil when the client sent no group metadata (before v3).
	Generation int32
	MemberID   string
	InstanceID *string
	Offsets    []store.TxnOffset
	// AddGroup (KIP-890 transactions v2, TxnOffsetCommit v5) adds the group to the
	// transaction, starting one if none is open, instead of requiring AddOffsetsToTxn.
	AddGroup bool
}

// TxnOffsetCommit stages offsets in the transaction (visible to the group only when it
// commits) and returns one Kafka code per offset, in order: INVALID_GROUP_ID (empty
// group), INVALID_PRODUCER_ID_MAPPING (no such id or another producer id),
// INVALID_PRODUCER_EPOCH (another epoch), INVALID_TXN_STATE (no Ongoing transaction,
// or the group was not added with AddOffsetsToTxn), CONCURRENT_TRANSACTIONS (Prepare*),
// UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION / FENCED_INSTANCE_ID (group metadata that does
// not match the group), OFFSET_METADATA_TOO_LARGE per offset. Nothing is staged unless
// every check passes (except the per-offset metadata size).
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req OffsetCommit) ([]int16, error) {
	codes := make([]int16, len(req.Offsets))
	fill := func(code int16) {
		for i := range codes {
			codes[i] = code
		}
	}
	switch {
	case req.TransactionalID == "":
		fill(codeInvalidRequest)
		return codes, nil
	case req.Group == "":
		fill(codeInvalidGroupID)
		return codes, nil
	case !storable(req.TransactionalID):
		fill(codeInvalidProducerIDMapping)
		return codes, nil
	}
	c.waitFinish(ctx, req.TransactionalID)
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		t, err := store.LockTxn(ctx, tx, req.TransactionalID)
		if errors.Is(err, store.ErrTxnNotFound) {
			fill(codeInvalidProducerIDMapping)
			return errDone
		}
		if err != nil {
			return err
		}
		code := producerCode(t, req.ProducerID, req.ProducerEpoch)
		if code == codeProducerFenced {
			code = codeInvalidProducerEpoch
		}
		if code == codeNone {
			code = offsetsState(t, req)
		}
		if code == codeNone {
			if code, err = memberCode(ctx, tx, req); err != nil {
				return err
			}
		}
		if code != codeNone {
			fill(code)
			return errDone
		}
		var ok []store.TxnOffset
		for i, o := range req.Offsets {
			if len(o.Metadata) > maxMetadataSize {
				codes[i] = codeOffsetMetadataTooLarge
				continue
			}
			ok = append(ok, o)
		}
		if req.AddGroup && (t.State != StateOngoing || !hasGroup(t, req.Group)) {
			if err := store.AddTxnGroup(ctx, tx, t.ID, req.Group); err != nil {
				return err
			}
			if err := c.begin(ctx, tx, t); err != nil {
				return err
			}
		}
		return store.StageTxnOffsets(ctx, tx, t.ID, req.Group, ok, c.now())
	})
	if err != nil {
		return nil, err
	}
	return codes, nil
}

// hasGroup reports whether group was added to t's transaction.
func hasGroup(t *store.Txn, group string) bool {
	for _, g := range t.Groups {
		if g == group {
			return true
		}
	}
	return false
}

// offsetsState is TxnOffsetCommit's check of the transaction's state: Prepare* is
// CONCURRENT_TRANSACTIONS; otherwise the group must be in the Ongoing transaction
// (INVALID_TXN_STATE), unless AddGroup adds it (any state but Dead).
func offsetsState(t *store.Txn, req OffsetCommit) int16 {
	switch {
	case t.State == StatePrepareCommit || t.State == StatePrepareAbort:
		return codeConcurrentTransactions
	case t.State == StateDead:
		return codeInvalidTxnState
	case req.AddGroup:
		return codeNone
	case t.State == StateOngoing && hasGroup(t, req.Group):
		return codeNone
	}
	return codeInvalidTxnState
}

// memberCode checks TxnOffsetCommit's group metadata (KIP-447) against the group, as
// Kafka's GroupMetadata.validateOffsetCommit: without a member id nothing is checked.
func memberCode(ctx context.Context, tx pgx.Tx, req OffsetCommit) (int16, error) {
	if req.MemberID == "" {
		return codeNone, nil
	}
	m, err := store.LookupGroupCommitMember(ctx, tx, req.Group, req.MemberID)
	if err != nil {
		return 0, err
	}
	switch {
	case !m.GroupFound:
		return codeUnknownMemberID, nil
	case !m.MemberFound:
		if req.InstanceID != nil {
			return codeFencedInstanceID, nil
		}
		return codeUnknownMemberID, nil
	}
	inst, gen := m.InstanceID, m.Generation
	if req.InstanceID != nil && (inst == nil || *inst != *req.InstanceID) {
		return codeFencedInstanceID, nil
	}
	if req.Generation != gen {
		return codeIllegalGeneration, nil
	}
	return codeNone, nil
}

// Sweep aborts the Ongoing transactions older than their timeout, with the epoch
// bumped so the producer that opened them is fenced, and finishes the markers of
// Prepare* transactions left behind (a coordinator that died between the decision and
// the last marker; not those whose finish runs in this process). Run by the one
// replica holding the sweep lock.
//
// Once a minute it also deletes the transactional ids unused for IDExpiration.
func (c *Coordinator) Sweep(ctx context.Context, now time.Time) error {
	c.expireMu.Lock()
	expire := now.Sub(c.lastExpire) >= expireEvery
	if expire {
		c.lastExpire = now
	}
	c.expireMu.Unlock()
	if expire {
		n, err := c.store.ExpireTxns(ctx, now.Add(-c.cfg.IDExpiration))
		if err != nil {
			return err
		}
		if n > 0 {
			c.log.Info("expired transactional ids", zap.Int64("count", n))
		}
	}
	open, err := c.store.ListOpenTxns(ctx)
	if err != nil {
		return err
	}
	var firstErr error
	for _, o := range open {
		switch o.State {
		case StateOngoing:
			if now.Sub(o.StartedAt) <= time.Duration(o.TimeoutMs)*time.Millisecond {
				continue
			}
			if err := c.abortTimedOut(ctx, o.ID, now); err != nil && firstErr == nil {
				firstErr = err
			}
		default:
			if c.finishRunning(o.ID) {
				// Its finish runs in this process: taking the row lock here would only
				// hold up that finish (its batch skips a locked row) and the
				// producer's next transaction.
				continue
			}
			if _, err := c.finish(ctx, o.ID); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}

// abortTimedOut fences and aborts one timed-out transaction, re-checked under the lock.
func (c *Coordinator) abortTimedOut(ctx context.Context, tid string, now time.Time) error {
	aborted := false
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		t, err := store.LockTxn(ctx, tx, tid)
		if err != nil {
			return err
		}
		if t.State != StateOngoing || now.Sub(t.StartedAt) <= time.Duration(t.TimeoutMs)*time.Millisecond {
			return errDone
		}
		if t.ProducerEpoch < math.MaxInt16 {
			t.ProducerEpoch++
		}
		t.State, aborted = StatePrepareAbort, true
		return store.SaveTxn(ctx, tx, t, c.now())
	})
	if err != nil || !aborted {
		return err
	}
	c.log.Info("transaction timed out, aborting", zap.String("transactional_id", tid))
	_, err = c.finish(ctx, tid)
	return err
}
