package txn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/services/coordinator/internal/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const envPostgres = "TRIBUTARY_TEST_POSTGRES_URL"

// fakeMarkers records the markers written; fail makes every call fail; a call waits
// for gate when it is set.
type fakeMarkers struct {
	mu      sync.Mutex
	written []Marker
	calls   []int // markers per call
	fail    atomic.Bool
	gate    chan struct{}
	// code, when set, answers each marker's code; a marker with a code other than 0
	// is not recorded as written.
	code func(Marker) int16
}

var errStorageDown = errors.New("storage-core down")

func (f *fakeMarkers) WriteMarkers(_ context.Context, ms []Marker) ([]int16, error) {
	if f.fail.Load() {
		return nil, errStorageDown
	}
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, len(ms))
	codes := make([]int16, len(ms))
	for i, m := range ms {
		if f.code != nil {
			codes[i] = f.code(m)
		}
		if codes[i] == 0 {
			f.written = append(f.written, m)
		}
	}
	return codes, nil
}

func (f *fakeMarkers) take() []Marker {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.written
	f.written = nil
	return out
}

type env struct {
	t       *testing.T
	st      *store.Store
	c       *Coordinator
	markers *fakeMarkers
	now     atomic.Int64 // unix ms of the coordinator's clock
	nextPID atomic.Int64
}

func newEnv(t *testing.T) *env {
	t.Helper()
	base := os.Getenv(envPostgres)
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Postgres is required in CI: %v", err)
		}
		t.Skipf("SKIPPING: Postgres (%s) is not reachable: %v", envPostgres, err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "tributary_txntest_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", pgx.Identifier{name}.Sanitize())); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	st, err := store.Open(u.String(), zap.NewNop())
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(st.Close)
	if err := st.Prepare(ctx); err != nil {
		t.Fatalf("apply migrations: %v", err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO topics (name, topic_id, partitions, configs)
		VALUES ('in', gen_random_uuid(), 3, '{}'), ('out', gen_random_uuid(), 2, '{}')`); err != nil {
		t.Fatalf("register topics: %v", err)
	}
	e := &env{t: t, st: st, markers: &fakeMarkers{}}
	e.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	e.nextPID.Store(1000)
	e.c = New(Config{}, Deps{
		Store:          st,
		Markers:        e.markers,
		NextProducerID: func(context.Context) (int64, error) { return e.nextPID.Add(1), nil },
		Log:            zaptest.NewLogger(t),
		Now:            func() time.Time { return time.UnixMilli(e.now.Load()) },
	})
	t.Cleanup(e.c.Close)
	return e
}

// written waits for the finishes EndTxn left running and returns the markers written
// since the last call.
func (e *env) written() []Marker {
	e.c.Close()
	return e.markers.take()
}

func (e *env) advance(d time.Duration) { e.now.Add(d.Milliseconds()) }

func (e *env) init(tid string, timeoutMs int32) (int64, int32) {
	e.t.Helper()
	code, pid, epoch, err := e.c.InitProducerID(context.Background(), tid, timeoutMs, -1, -1)
	if err != nil || code != 0 {
		e.t.Fatalf("InitProducerID(%q) = %d, %v", tid, code, err)
	}
	return pid, epoch
}

func (e *env) add(tid string, pid int64, epoch int32, parts ...store.TxnPartition) []int16 {
	e.t.Helper()
	codes, err := e.c.AddPartitions(context.Background(), Partitions{TransactionalID: tid, ProducerID: pid, ProducerEpoch: epoch, Topics: parts})
	if err != nil {
		e.t.Fatalf("AddPartitions: %v", err)
	}
	return codes
}

func (e *env) state(tid string) *store.Txn {
	e.t.Helper()
	var t *store.Txn
	err := e.st.InTx(context.Background(), func(tx pgx.Tx) error {
		var err error
		t, err = store.LockTxn(context.Background(), tx, tid)
		return err
	})
	if err != nil {
		e.t.Fatalf("read transaction %q: %v", tid, err)
	}
	return t
}

// committed returns the group's committed offset of in-<p>, -1 when none.
func (e *env) committed(group string, p int32) int64 {
	e.t.Helper()
	var off int64 = -1
	err := e.st.Pool().QueryRow(context.Background(), `SELECT committed_offset FROM consumer_group_offsets
		WHERE group_id = $1 AND topic = 'in' AND partition = $2`, group, p).Scan(&off)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		e.t.Fatal(err)
	}
	return off
}

func (e *env) pending(group string) map[store.TxnPartition]bool {
	e.t.Helper()
	m, err := store.PendingTxnOffsets(context.Background(), e.st.Pool(), group)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func codesEqual(got []int16, want ...int16) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func tp(topic string, p int32) store.TxnPartition {
	return store.TxnPartition{Topic: topic, Partition: p}
}

func TestCommitWritesMarkersAndPublishesOffsets(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-a", 60000)
	if epoch != 0 {
		t.Fatalf("new transactional id: epoch %d, want 0", epoch)
	}
	if got := e.add("tx-a", pid, epoch, tp("out", 0), tp("out", 1)); !codesEqual(got, 0, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	if st := e.state("tx-a"); st.State != StateOngoing || st.StartedAt.IsZero() {
		t.Fatalf("after AddPartitions: state %s started %v", st.State, st.StartedAt)
	}
	if code, err := e.c.AddOffsets(ctx, "tx-a", pid, epoch, "g"); err != nil || code != 0 {
		t.Fatalf("AddOffsets = %d, %v", code, err)
	}
	codes, err := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-a", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 2, Offset: 42, LeaderEpoch: -1}}})
	if err != nil || !codesEqual(codes, 0) {
		t.Fatalf("TxnOffsetCommit = %v, %v", codes, err)
	}
	if e.committed("g", 2) != -1 || !e.pending("g")[tp("in", 2)] {
		t.Fatalf("before commit: committed %d pending %v; want not visible, pending", e.committed("g", 2), e.pending("g"))
	}
	if code, _, _, err := e.c.EndTxn(ctx, "tx-a", pid, epoch, true, false); err != nil || code != 0 {
		t.Fatalf("EndTxn(commit) = %d, %v", code, err)
	}
	ms := e.written()
	if len(ms) != 2 {
		t.Fatalf("markers %+v, want one per partition", ms)
	}
	for i, m := range ms {
		if m.Topic != "out" || m.Partition != int32(i) || !m.Commit || m.ProducerID != pid || m.ProducerEpoch != epoch {
			t.Fatalf("marker %d = %+v", i, m)
		}
	}
	if st := e.state("tx-a"); st.State != StateCompleteCommit || len(st.Partitions) != 0 || len(st.Groups) != 0 {
		t.Fatalf("after commit: %+v", st)
	}
	if got := e.committed("g", 2); got != 42 {
		t.Fatalf("committed offset after commit = %d, want 42", got)
	}
	if len(e.pending("g")) != 0 {
		t.Fatalf("pending after commit: %v", e.pending("g"))
	}
	// A retried EndTxn is recognised and writes nothing; the other decision is refused.
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-a", pid, epoch, true, false); code != 0 {
		t.Fatalf("retried EndTxn(commit) = %d, want 0", code)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-a", pid, epoch, false, false); code != codeInvalidTxnState {
		t.Fatalf("EndTxn(abort) after commit = %d, want INVALID_TXN_STATE", code)
	}
	if ms := e.written(); len(ms) != 0 {
		t.Fatalf("retries wrote markers: %+v", ms)
	}
	// The next transaction starts from CompleteCommit.
	if got := e.add("tx-a", pid, epoch, tp("out", 1)); !codesEqual(got, 0) {
		t.Fatalf("second transaction AddPartitions = %v", got)
	}
}

func TestAbortDropsOffsets(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-b", 60000)
	e.add("tx-b", pid, epoch, tp("out", 1))
	if code, _ := e.c.AddOffsets(ctx, "tx-b", pid, epoch, "g"); code != 0 {
		t.Fatalf("AddOffsets = %d", code)
	}
	if _, err := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-b", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 7}}}); err != nil {
		t.Fatal(err)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-b", pid, epoch, false, false); code != 0 {
		t.Fatalf("EndTxn(abort) = %d", code)
	}
	ms := e.written()
	if len(ms) != 1 || ms[0].Commit || ms[0].Partition != 1 {
		t.Fatalf("markers %+v, want one ABORT for out-1", ms)
	}
	if e.committed("g", 0) != -1 || len(e.pending("g")) != 0 {
		t.Fatalf("after abort: committed %d pending %v", e.committed("g", 0), e.pending("g"))
	}
	if st := e.state("tx-b"); st.State != StateCompleteAbort {
		t.Fatalf("state %s", st.State)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-b", pid, epoch, true, false); code != codeInvalidTxnState {
		t.Fatalf("EndTxn(commit) after abort = %d, want INVALID_TXN_STATE", code)
	}
}

func TestFencing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, old := e.init("tx-f", 60000)
	e.add("tx-f", pid, old, tp("out", 0))
	// A second producer with the same id: the Ongoing transaction is aborted with the
	// epoch bumped (fencing the first) and the second is told to retry.
	code, _, _, err := e.c.InitProducerID(ctx, "tx-f", 60000, -1, -1)
	if err != nil || code != codeConcurrentTransactions {
		t.Fatalf("InitProducerID over an Ongoing transaction = %d, %v; want CONCURRENT_TRANSACTIONS", code, err)
	}
	ms := e.written()
	if len(ms) != 1 || ms[0].Commit || ms[0].ProducerEpoch != old+1 {
		t.Fatalf("fence markers %+v, want one ABORT at epoch %d", ms, old+1)
	}
	_, pid2, epoch2, err := e.c.InitProducerID(ctx, "tx-f", 60000, -1, -1)
	if err != nil || pid2 != pid || epoch2 != old+2 {
		t.Fatalf("retried InitProducerID = %d/%d, %v; want %d/%d", pid2, epoch2, err, pid, old+2)
	}
	if got := e.add("tx-f", pid, old, tp("out", 1)); !codesEqual(got, codeProducerFenced) {
		t.Fatalf("old producer AddPartitions = %v, want PRODUCER_FENCED", got)
	}
	if code, _ := e.c.AddOffsets(ctx, "tx-f", pid, old, "g"); code != codeProducerFenced {
		t.Fatalf("old producer AddOffsets = %d", code)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-f", pid, old, true, false); code != codeProducerFenced {
		t.Fatalf("old producer EndTxn = %d", code)
	}
	// The new producer opens a transaction; the old one cannot commit offsets in it.
	e.add("tx-f", pid, epoch2, tp("out", 1))
	if code, _ := e.c.AddOffsets(ctx, "tx-f", pid, epoch2, "g"); code != 0 {
		t.Fatalf("AddOffsets = %d", code)
	}
	codes, _ := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-f", Group: "g", ProducerID: pid, ProducerEpoch: old,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 1}}})
	if !codesEqual(codes, codeInvalidProducerEpoch) || len(e.pending("g")) != 0 {
		t.Fatalf("TxnOffsetCommit with the old epoch = %v, pending %v", codes, e.pending("g"))
	}
	codes, _ = e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-f", Group: "g", ProducerID: pid + 1, ProducerEpoch: epoch2,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 1}}})
	if !codesEqual(codes, codeInvalidProducerIDMapping) {
		t.Fatalf("TxnOffsetCommit with another producer id = %v", codes)
	}
	// Verify-only (the Produce check): only the current producer's added partitions.
	check := func(epoch int32, p store.TxnPartition) int16 {
		codes, err := e.c.AddPartitions(ctx, Partitions{TransactionalID: "tx-f", ProducerID: pid, ProducerEpoch: epoch, VerifyOnly: true,
			Topics: []store.TxnPartition{p}})
		if err != nil {
			t.Fatal(err)
		}
		return codes[0]
	}
	if c := check(epoch2, tp("out", 1)); c != 0 {
		t.Fatalf("verify added partition = %d", c)
	}
	if c := check(epoch2, tp("out", 0)); c != codeInvalidTxnState {
		t.Fatalf("verify partition not added = %d", c)
	}
	if c := check(old, tp("out", 1)); c != codeProducerFenced {
		t.Fatalf("verify with the old epoch = %d", c)
	}
}

func TestKIP360Recovery(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-r", 60000)
	_, pid1, epoch1, _ := e.c.InitProducerID(ctx, "tx-r", 60000, pid, epoch)
	if pid1 != pid || epoch1 != epoch+1 {
		t.Fatalf("bump with the current epoch = %d/%d", pid1, epoch1)
	}
	// The answer was lost: the producer retries with the epoch it had.
	_, pid2, epoch2, _ := e.c.InitProducerID(ctx, "tx-r", 60000, pid, epoch)
	if pid2 != pid1 || epoch2 != epoch1 {
		t.Fatalf("retried bump = %d/%d, want %d/%d unchanged", pid2, epoch2, pid1, epoch1)
	}
	if code, _, _, _ := e.c.InitProducerID(ctx, "tx-r", 60000, pid, epoch+7); code != codeProducerFenced {
		t.Fatalf("bump with an unknown epoch = %d, want PRODUCER_FENCED", code)
	}
	// Exhausted epochs move to a fresh producer id.
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET producer_epoch = 32766 WHERE transactional_id = 'tx-r'`); err != nil {
		t.Fatal(err)
	}
	_, pid3, epoch3, _ := e.c.InitProducerID(ctx, "tx-r", 60000, -1, -1)
	if pid3 == pid || epoch3 != 0 {
		t.Fatalf("after an exhausted epoch = %d/%d, want a fresh id at epoch 0", pid3, epoch3)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, ms := range []int32{0, -1, int32(DefaultMaxTimeout/time.Millisecond) + 1} {
		if code, _, _, _ := e.c.InitProducerID(ctx, "tx-x", ms, -1, -1); code != codeInvalidTxnTimeout {
			t.Fatalf("timeout %d ms: %d, want INVALID_TRANSACTION_TIMEOUT", ms, code)
		}
	}
	pid, epoch := e.init("tx-x", 60000)
	if got := e.add("tx-x", pid, epoch, tp("out", 0), tp("nope", 0), tp("out", 2)); !codesEqual(got, codeOperationNotAttempted, codeUnknownTopicOrPartition, codeUnknownTopicOrPartition) {
		t.Fatalf("AddPartitions with unknown partitions = %v", got)
	}
	if st := e.state("tx-x"); st.State != StateEmpty || len(st.Partitions) != 0 {
		t.Fatalf("after refused AddPartitions: %+v", st)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-x", pid, epoch, true, false); code != codeInvalidTxnState {
		t.Fatalf("EndTxn without a transaction = %d, want INVALID_TXN_STATE", code)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-none", 1, 0, true, false); code != codeInvalidProducerIDMapping {
		t.Fatalf("EndTxn of an unknown id = %d", code)
	}
	if got := e.add("tx-none", 1, 0, tp("out", 0)); !codesEqual(got, codeInvalidProducerIDMapping) {
		t.Fatalf("AddPartitions of an unknown id = %v", got)
	}
	codes, _ := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-x", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 1}}})
	if !codesEqual(codes, codeInvalidTxnState) || len(e.pending("g")) != 0 {
		t.Fatalf("TxnOffsetCommit without AddOffsetsToTxn = %v", codes)
	}
	if ms := e.written(); len(ms) != 0 {
		t.Fatalf("bad input wrote markers %+v", ms)
	}
	if st := e.state("tx-x"); st.State != StateEmpty || st.ProducerEpoch != epoch {
		t.Fatalf("bad input changed the transaction: %+v", st)
	}
}

func TestDecisionSurvivesMarkerFailure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-c", 60000)
	e.add("tx-c", pid, epoch, tp("out", 0), tp("out", 1))
	e.c.AddOffsets(ctx, "tx-c", pid, epoch, "g")
	e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-c", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
		Generation: -1, Offsets: []store.TxnOffset{{Topic: "in", Partition: 1, Offset: 9}}})
	e.markers.fail.Store(true)
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-c", pid, epoch, true, false); code != 0 {
		t.Fatalf("EndTxn with storage down = %d, want 0 (the decision is durable)", code)
	}
	if st := e.state("tx-c"); st.State != StatePrepareCommit || len(st.Partitions) != 2 {
		t.Fatalf("after failed markers: %+v", st)
	}
	if e.committed("g", 1) != -1 {
		t.Fatal("offsets visible before the markers are written")
	}
	if got := e.add("tx-c", pid, epoch, tp("out", 0)); !codesEqual(got, codeConcurrentTransactions) {
		t.Fatalf("AddPartitions during PrepareCommit = %v", got)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-c", pid, epoch, true, false); code != codeConcurrentTransactions {
		t.Fatalf("retried EndTxn while markers fail = %d", code)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-c", pid, epoch, false, false); code != codeInvalidTxnState {
		t.Fatalf("EndTxn(abort) during PrepareCommit = %d", code)
	}
	// storage-core is back: the sweep (another coordinator after a crash) finishes.
	e.markers.fail.Store(false)
	if err := e.c.Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
		t.Fatal(err)
	}
	if ms := e.written(); len(ms) != 2 || !ms[0].Commit || !ms[1].Commit {
		t.Fatalf("sweep markers %+v", ms)
	}
	if st := e.state("tx-c"); st.State != StateCompleteCommit || e.committed("g", 1) != 9 {
		t.Fatalf("after sweep: state %s committed %d", st.State, e.committed("g", 1))
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-c", pid, epoch, true, false); code != 0 {
		t.Fatalf("retried EndTxn after completion = %d", code)
	}
}

func TestTimeoutAbortsAndFences(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-t", 1000)
	e.add("tx-t", pid, epoch, tp("out", 0))
	e.advance(900 * time.Millisecond)
	if err := e.c.Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
		t.Fatal(err)
	}
	if st := e.state("tx-t"); st.State != StateOngoing {
		t.Fatalf("aborted before its timeout: %s", st.State)
	}
	e.advance(200 * time.Millisecond)
	if err := e.c.Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
		t.Fatal(err)
	}
	ms := e.written()
	if len(ms) != 1 || ms[0].Commit || ms[0].ProducerEpoch != epoch+1 {
		t.Fatalf("timeout markers %+v, want one ABORT at epoch %d", ms, epoch+1)
	}
	if st := e.state("tx-t"); st.State != StateCompleteAbort || st.ProducerEpoch != epoch+1 {
		t.Fatalf("after timeout: %+v", st)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-t", pid, epoch, true, false); code != codeProducerFenced {
		t.Fatalf("zombie EndTxn = %d, want PRODUCER_FENCED", code)
	}
	if got := e.add("tx-t", pid, epoch, tp("out", 0)); !codesEqual(got, codeProducerFenced) {
		t.Fatalf("zombie AddPartitions = %v", got)
	}
}

func TestTxnOffsetCommitChecksMember(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pool := e.st.Pool()
	if _, err := pool.Exec(ctx, `INSERT INTO consumer_groups (group_id, state, generation) VALUES ('g', 'Stable', 3)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO consumer_group_members (group_id, member_id, session_timeout_ms, rebalance_timeout_ms,
		protocol_names, protocol_metadata, session_deadline, joined_at) VALUES ('g', 'm1', 10000, 10000, '{}', '{}', now(), now())`); err != nil {
		t.Fatal(err)
	}
	pid, epoch := e.init("tx-m", 60000)
	e.c.AddOffsets(ctx, "tx-m", pid, epoch, "g")
	commit := func(member string, gen int32) int16 {
		codes, err := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-m", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
			Generation: gen, MemberID: member, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 5}}})
		if err != nil {
			t.Fatal(err)
		}
		return codes[0]
	}
	if c := commit("m2", 3); c != codeUnknownMemberID {
		t.Fatalf("unknown member = %d", c)
	}
	if c := commit("m1", 2); c != codeIllegalGeneration {
		t.Fatalf("old generation = %d", c)
	}
	if len(e.pending("g")) != 0 {
		t.Fatal("refused commits staged offsets")
	}
	if c := commit("m1", 3); c != 0 {
		t.Fatalf("current member = %d", c)
	}
}

func TestDescribeAndListTransactions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	srv := NewServer(e.c)
	pidA, epochA := e.init("tx-a", 60000)
	e.add("tx-a", pidA, epochA, tp("out", 1), tp("in", 0), tp("out", 0))
	started := time.UnixMilli(e.now.Load())
	e.advance(5 * time.Second)
	pidB, _ := e.init("tx-b", 30000)

	d, err := srv.DescribeTransactions(ctx, &coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{"tx-a", "nope", "tx-b"}})
	if err != nil {
		t.Fatal(err)
	}
	a, nope, b := d.GetTransactions()[0], d.GetTransactions()[1], d.GetTransactions()[2]
	if a.GetState() != StateOngoing || a.GetProducerId() != pidA || a.GetTimeoutMs() != 60000 || a.GetStartTimeMs() != started.UnixMilli() ||
		len(a.GetTopics()) != 2 || a.GetTopics()[0].GetName() != "in" || len(a.GetTopics()[1].GetPartitions()) != 2 {
		t.Errorf("describe tx-a: %v", a)
	}
	if nope.GetErrorCode() != codeTransactionalIDNotFound {
		t.Errorf("describe unknown: %v", nope)
	}
	if b.GetState() != StateEmpty || b.GetStartTimeMs() != -1 || len(b.GetTopics()) != 0 {
		t.Errorf("describe tx-b: %v", b)
	}
	list := func(req *coordinatorv1.ListTransactionsRequest) []string {
		r, err := srv.ListTransactions(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range r.GetTransactions() {
			ids = append(ids, x.GetTransactionalId())
		}
		return append(ids, r.GetUnknownStates()...)
	}
	check := func(name string, got []string, want ...string) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("all", list(&coordinatorv1.ListTransactionsRequest{MinDurationMs: -1}), "tx-a", "tx-b")
	check("state", list(&coordinatorv1.ListTransactionsRequest{States: []string{"Ongoing", "Bogus"}, MinDurationMs: -1}), "tx-a", "Bogus")
	check("only unknown states", list(&coordinatorv1.ListTransactionsRequest{States: []string{"Bogus"}, MinDurationMs: -1}), "Bogus")
	check("producer", list(&coordinatorv1.ListTransactionsRequest{ProducerIds: []int64{pidB}, MinDurationMs: -1}), "tx-b")
	check("open 4 s", list(&coordinatorv1.ListTransactionsRequest{MinDurationMs: 4000}), "tx-a")
	check("open 6 s", list(&coordinatorv1.ListTransactionsRequest{MinDurationMs: 6000}))
}

// TestLongTransactionalID: an id too long to be a Postgres key is refused at once with
// a code no client retries (not a storage failure answered as a retriable outage), and
// stores nothing; the longest allowed id, incompressible, works.
func TestLongTransactionalID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	raw := make([]byte, 2*MaxTransactionalIDBytes)
	_, _ = rand.Read(raw)
	long := []byte(hex.EncodeToString(raw)) // LZ-incompressible, past Postgres's index row limit
	code, pid, _, err := e.c.InitProducerID(ctx, string(long), 60000, -1, -1)
	if err != nil || code != codeUnknownServerError || pid != -1 {
		t.Fatalf("InitProducerID(%d-byte id) = %d, pid %d, %v; want UNKNOWN_SERVER_ERROR", len(long), code, pid, err)
	}
	if got := e.add(string(long), 1, 0, tp("out", 0)); !codesEqual(got, codeInvalidProducerIDMapping) {
		t.Fatalf("AddPartitions of the refused id = %v", got)
	}
	pid, epoch := e.init(string(long[:MaxTransactionalIDBytes]), 60000)
	if got := e.add(string(long[:MaxTransactionalIDBytes]), pid, epoch, tp("out", 0), tp("out", 1)); !codesEqual(got, 0, 0) {
		t.Fatalf("AddPartitions of the longest id = %v", got)
	}
	if code, _, _, err := e.c.EndTxn(ctx, string(long[:MaxTransactionalIDBytes]), pid, epoch, true, false); err != nil || code != 0 {
		t.Fatalf("EndTxn of the longest id = %d, %v", code, err)
	}
}

func TestTransactionsV2(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-v2", 60000)
	// No AddOffsetsToTxn: TxnOffsetCommit v5 adds the group and opens the transaction.
	codes, err := e.c.TxnOffsetCommit(ctx, OffsetCommit{TransactionalID: "tx-v2", Group: "g", ProducerID: pid, ProducerEpoch: epoch,
		Generation: -1, AddGroup: true, Offsets: []store.TxnOffset{{Topic: "in", Partition: 0, Offset: 3}}})
	if err != nil || !codesEqual(codes, 0) {
		t.Fatalf("TxnOffsetCommit(add group) = %v, %v", codes, err)
	}
	if st := e.state("tx-v2"); st.State != StateOngoing || len(st.Groups) != 1 {
		t.Fatalf("after implicit add: %+v", st)
	}
	e.add("tx-v2", pid, epoch, tp("out", 0))
	code, _, next, err := e.c.EndTxn(ctx, "tx-v2", pid, epoch, true, true)
	if err != nil || code != 0 || next != epoch+1 {
		t.Fatalf("EndTxn v5 = %d epoch %d, %v; want epoch %d", code, next, err, epoch+1)
	}
	if ms := e.written(); len(ms) != 1 || ms[0].ProducerEpoch != epoch+1 || !ms[0].Commit {
		t.Fatalf("markers %+v, want one COMMIT at the bumped epoch", ms)
	}
	if e.committed("g", 0) != 3 {
		t.Fatalf("offset not committed")
	}
	// The answer was lost: the retry with the old epoch is the same end.
	if code, _, again, _ := e.c.EndTxn(ctx, "tx-v2", pid, epoch, true, true); code != 0 || again != epoch+1 {
		t.Fatalf("retried EndTxn v5 = %d epoch %d", code, again)
	}
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-v2", pid, epoch, false, true); code != codeProducerFenced {
		t.Fatalf("EndTxn v5 abort with the old epoch = %d, want PRODUCER_FENCED", code)
	}
	// The next transaction uses the bumped epoch; the old one is fenced.
	if got := e.add("tx-v2", pid, epoch, tp("out", 1)); !codesEqual(got, codeProducerFenced) {
		t.Fatalf("old epoch after the bump = %v", got)
	}
	if got := e.add("tx-v2", pid, next, tp("out", 1)); !codesEqual(got, 0) {
		t.Fatalf("bumped epoch = %v", got)
	}
	if ms := e.written(); len(ms) != 0 {
		t.Fatalf("retries wrote markers %+v", ms)
	}
}

// TestConcurrentInitNewID: InitProducerId calls racing on a new transactional id are
// ordered like calls on a known one: one creates it, each other bumps the epoch, so
// every answer is the one producer id at its own epoch. The row was upserted, so each
// racer that had found no row got a producer id of its own at epoch 0 and overwrote
// the others' row (with its partitions, were a transaction open).
func TestConcurrentInitNewID(t *testing.T) {
	e := newEnv(t)
	const n, racers = 16, 4
	// The first racers to find no row wait for each other inside the window between
	// that read and the row's insert, so the race is met every run.
	var arrived atomic.Int32
	gate := make(chan struct{})
	e.c = New(Config{}, Deps{Store: e.st, Markers: e.markers, Log: zaptest.NewLogger(t),
		NextProducerID: func(ctx context.Context) (int64, error) {
			if arrived.Add(1) == racers {
				close(gate)
			}
			select {
			case <-gate:
			case <-time.After(5 * time.Second): // fewer racers found no row: go on
			case <-ctx.Done():
			}
			return e.nextPID.Add(1), nil
		}})
	type answer struct {
		pid   int64
		epoch int32
	}
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, pid, epoch, err := e.c.InitProducerID(context.Background(), "tx-race", 60000, -1, -1)
			if err != nil || code != 0 {
				t.Errorf("InitProducerID = %d, %v", code, err)
				return
			}
			answers <- answer{pid, epoch}
		}()
	}
	wg.Wait()
	close(answers)
	seen := map[answer]bool{}
	row := e.state("tx-race")
	for a := range answers {
		if a.pid != row.ProducerID || seen[a] {
			t.Errorf("answer %+v beside others %v; the row has producer %d epoch %d", a, seen, row.ProducerID, row.ProducerEpoch)
		}
		seen[a] = true
	}
	if len(seen) != n || row.ProducerEpoch != n-1 {
		t.Fatalf("%d distinct answers, row epoch %d; want %d, %d", len(seen), row.ProducerEpoch, n, n-1)
	}
}

// TestDescribeEmptyID: DescribeTransactions answers an empty transactional id
// INVALID_REQUEST, as Kafka does, not TRANSACTIONAL_ID_NOT_FOUND.
func TestDescribeEmptyID(t *testing.T) {
	e := newEnv(t)
	d, err := NewServer(e.c).DescribeTransactions(context.Background(), &coordinatorv1.DescribeTransactionsRequest{TransactionalIds: []string{"", "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetTransactions(); len(got) != 2 || got[0].GetErrorCode() != codeInvalidRequest || got[1].GetErrorCode() != codeTransactionalIDNotFound {
		t.Fatalf("describe \"\" and an unknown id: %v", got)
	}
}

func TestTransactionalIDExpiration(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pidIdle, epochIdle := e.init("tx-idle", 60000)
	e.add("tx-idle", pidIdle, epochIdle, tp("out", 0))
	if code, _, _, _ := e.c.EndTxn(ctx, "tx-idle", pidIdle, epochIdle, true, false); code != 0 {
		t.Fatalf("EndTxn = %d", code)
	}
	e.c.Close() // the markers follow EndTxn's answer: CompleteCommit before the clock moves
	pidOpen, epochOpen := e.init("tx-open", int32(DefaultMaxTimeout/time.Millisecond))
	e.add("tx-open", pidOpen, epochOpen, tp("out", 1))
	e.advance(DefaultIDExpiration - time.Minute)
	if err := e.c.Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
		t.Fatal(err)
	}
	e.state("tx-idle") // still there (fails the test when gone)
	e.advance(2 * time.Minute)
	// The open transaction timed out long ago: the sweep aborts it (not expired: it
	// was open), and expires the idle id.
	if err := e.c.Sweep(ctx, time.UnixMilli(e.now.Load())); err != nil {
		t.Fatal(err)
	}
	if err := e.st.InTx(ctx, func(tx pgx.Tx) error {
		_, err := store.LockTxn(ctx, tx, "tx-idle")
		return err
	}); !errors.Is(err, store.ErrTxnNotFound) {
		t.Fatalf("idle id after its expiration: %v, want not found", err)
	}
	if got := e.add("tx-idle", pidIdle, epochIdle, tp("out", 0)); !codesEqual(got, codeInvalidProducerIDMapping) {
		t.Fatalf("expired id's producer AddPartitions = %v", got)
	}
	if st := e.state("tx-open"); st.State != StateCompleteAbort {
		t.Fatalf("open transaction: %s, want aborted (not expired)", st.State)
	}
	// A new producer with the expired id starts afresh.
	if _, pid, epoch, err := e.c.InitProducerID(ctx, "tx-idle", 60000, -1, -1); err != nil || pid == pidIdle || epoch != 0 {
		t.Fatalf("InitProducerID after expiration = %d/%d, %v; want a fresh id", pid, epoch, err)
	}
}

func TestEndTxnAnswersBeforeMarkersAndNextCallWaits(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, epoch := e.init("tx-bg", 60000)
	if got := e.add("tx-bg", pid, epoch, tp("out", 0)); !codesEqual(got, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	gate := make(chan struct{})
	e.markers.gate = gate
	ended := make(chan int16, 1)
	go func() {
		code, _, _, err := e.c.EndTxn(ctx, "tx-bg", pid, epoch, true, false)
		if err != nil {
			code = -100
		}
		ended <- code
	}()
	select {
	case code := <-ended:
		if code != 0 {
			close(gate)
			t.Fatalf("EndTxn(commit) = %d, want 0", code)
		}
	case <-time.After(20 * time.Second):
		close(gate)
		t.Fatal("EndTxn did not answer while its markers were being written")
	}
	// The next transaction's AddPartitions, sent before the markers are written, waits
	// for them instead of meeting PrepareCommit, and then adds to the transaction the
	// finisher left complete: on this coordinator it waits for its own finish without
	// a connection; on another replica (same database) it waits for the finisher's row
	// lock (its one-statement path waits on the lock although its snapshot shows
	// PrepareCommit).
	other := New(Config{}, Deps{Store: e.st, Markers: e.markers,
		NextProducerID: func(context.Context) (int64, error) { return e.nextPID.Add(1), nil },
		Log:            zaptest.NewLogger(t), Now: func() time.Time { return time.UnixMilli(e.now.Load()) }})
	defer other.Close()
	add := func(c *Coordinator, out chan<- []int16) {
		codes, err := c.AddPartitions(ctx, Partitions{TransactionalID: "tx-bg", ProducerID: pid, ProducerEpoch: epoch,
			Topics: []store.TxnPartition{tp("out", 1)}})
		if err != nil {
			codes = nil
		}
		out <- codes
	}
	added, addedOther := make(chan []int16, 1), make(chan []int16, 1)
	go add(e.c, added)
	go add(other, addedOther)
	for deadline := time.Now().Add(20 * time.Second); ; {
		var waiting int
		if err := e.st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			close(gate)
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("the other replica's AddPartitions did not wait for the finisher's row lock")
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
	select {
	case got := <-added:
		close(gate)
		t.Fatalf("AddPartitions answered %v while the markers were not written", got)
	case got := <-addedOther:
		close(gate)
		t.Fatalf("the other replica's AddPartitions answered %v while the markers were not written", got)
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	if got := <-added; !codesEqual(got, 0) {
		t.Fatalf("AddPartitions after EndTxn = %v, want [0] (not CONCURRENT_TRANSACTIONS)", got)
	}
	if got := <-addedOther; !codesEqual(got, 0) {
		t.Fatalf("the other replica's AddPartitions after EndTxn = %v, want [0] (not CONCURRENT_TRANSACTIONS)", got)
	}
	if ms := e.written(); len(ms) != 1 || !ms[0].Commit || ms[0].Partition != 0 {
		t.Fatalf("markers %+v, want one COMMIT on out-0", ms)
	}
	if st := e.state("tx-bg"); st.State != StateOngoing || len(st.Partitions) != 1 || st.Partitions[0] != tp("out", 1) {
		t.Fatalf("next transaction: %+v", st)
	}
}

// TestEndTxnV5ExhaustedEpochMovesToNewProducerID: a KIP-890 EndTxn at an exhausted
// epoch (Kafka's isEpochExhausted, 32766) writes its markers with the old producer id
// at the last epoch (32767) and answers a fresh producer id at epoch 0, which the next
// transaction uses; the old id is refused and a retry of the end is answered the same.
// Before, the epoch stopped at 32767 and every later end answered 32767 again.
func TestEndTxnV5ExhaustedEpochMovesToNewProducerID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pid, _ := e.init("tx-ex", 60000)
	const exhausted = math.MaxInt16 - 1
	if _, err := e.st.Pool().Exec(ctx, `UPDATE transactions SET producer_epoch = $1 WHERE transactional_id = 'tx-ex'`, exhausted); err != nil {
		t.Fatal(err)
	}
	if got := e.add("tx-ex", pid, exhausted, tp("out", 0), tp("out", 1)); !codesEqual(got, 0, 0) {
		t.Fatalf("AddPartitions = %v", got)
	}
	code, newPID, newEpoch, err := e.c.EndTxn(ctx, "tx-ex", pid, exhausted, true, true)
	if err != nil || code != 0 || newPID == pid || newPID < 0 || newEpoch != 0 {
		t.Fatalf("EndTxn v5 at epoch %d = %d, %d/%d, %v; want NONE, a new producer id at epoch 0",
			exhausted, code, newPID, newEpoch, err)
	}
	ms := e.written()
	if len(ms) != 2 {
		t.Fatalf("markers %+v, want 2", ms)
	}
	for _, m := range ms {
		if m.ProducerID != pid || m.ProducerEpoch != math.MaxInt16 || !m.Commit {
			t.Fatalf("marker %+v, want COMMIT of producer %d at epoch %d", m, pid, math.MaxInt16)
		}
	}
	if st := e.state("tx-ex"); st.State != StateCompleteCommit || st.ProducerID != newPID || st.ProducerEpoch != 0 || st.NextProducerID != -1 {
		t.Fatalf("after the end: %+v, want CompleteCommit at %d/0", st, newPID)
	}
	// The answer was lost: the retry with the old id and epoch is the same end.
	if code, p, ep, _ := e.c.EndTxn(ctx, "tx-ex", pid, exhausted, true, true); code != 0 || p != newPID || ep != 0 {
		t.Fatalf("retried EndTxn v5 = %d, %d/%d; want NONE, %d/0", code, p, ep, newPID)
	}
	// The old producer id is fenced (another producer id: INVALID_PRODUCER_ID_MAPPING).
	for _, ep := range []int32{exhausted, math.MaxInt16} {
		if got := e.add("tx-ex", pid, ep, tp("out", 0)); !codesEqual(got, codeInvalidProducerIDMapping) {
			t.Fatalf("old producer %d/%d after the move = %v, want INVALID_PRODUCER_ID_MAPPING", pid, ep, got)
		}
	}
	// The next transaction runs with the new id and bumps its epoch as usual.
	if got := e.add("tx-ex", newPID, 0, tp("out", 1)); !codesEqual(got, 0) {
		t.Fatalf("AddPartitions with the new producer id = %v", got)
	}
	code, p2, ep2, err := e.c.EndTxn(ctx, "tx-ex", newPID, 0, false, true)
	if err != nil || code != 0 || p2 != newPID || ep2 != 1 {
		t.Fatalf("EndTxn v5 with the new id = %d, %d/%d, %v; want NONE, %d/1", code, p2, ep2, err, newPID)
	}
	if ms := e.written(); len(ms) != 1 || ms[0].ProducerID != newPID || ms[0].ProducerEpoch != 1 || ms[0].Commit {
		t.Fatalf("markers %+v, want one ABORT of %d at epoch 1", ms, newPID)
	}
}

// TestConcurrentInitsWithPooledProducerIDs: many new transactional ids initialised at
// once, with producer ids reserved through the same connection pool (as the handler's
// blocks are), all get their ids. Allocating inside the Postgres transaction held one
// pooled connection per call while the allocation waited for another, so with every
// connection held none was left and the calls waited until their deadline.
func TestConcurrentInitsWithPooledProducerIDs(t *testing.T) {
	e := newEnv(t)
	var (
		mu   sync.Mutex
		next int64 = 5000
	)
	c := New(Config{}, Deps{
		Store:   e.st,
		Markers: e.markers,
		NextProducerID: func(ctx context.Context) (int64, error) {
			mu.Lock() // held across the reservation, as producerIDs.Next holds its mutex
			defer mu.Unlock()
			var one int
			if err := e.st.Pool().QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
				return 0, err
			}
			next++
			return next, nil
		},
		Log: zaptest.NewLogger(t),
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 48 // three times the pool's 16 connections
	var wg sync.WaitGroup
	pids := make(chan int64, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, pid, epoch, err := c.InitProducerID(ctx, fmt.Sprintf("tx-many-%d", i), 60000, -1, -1)
			if err != nil || code != 0 || epoch != 0 {
				t.Errorf("InitProducerID(tx-many-%d) = %d, %d, %v", i, code, epoch, err)
				return
			}
			pids <- pid
		}()
	}
	wg.Wait()
	close(pids)
	seen := map[int64]bool{}
	for pid := range pids {
		if seen[pid] {
			t.Errorf("producer id %d handed out twice", pid)
		}
		seen[pid] = true
	}
	if len(seen) != n {
		t.Fatalf("%d producer ids for %d new transactional ids", len(seen), n)
	}
}
