package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Txn is one transactional id's row in transactions (migration 00300), with the
// partitions and groups of its current transaction.
type Txn struct {
	ID            string
	ProducerID    int64
	ProducerEpoch int32
	// The id and epoch before the last InitProducerId bump (-1 when none).
	LastProducerID    int64
	LastProducerEpoch int32
	// The producer id the row moves to (epoch 0) when its Prepare* transaction
	// completes: set by a KIP-890 EndTxn at an exhausted epoch (-1 when none).
	NextProducerID int64
	// Kafka state name (Empty, Ongoing, PrepareCommit, ...).
	State     string
	TimeoutMs int32
	// When the current transaction became Ongoing; zero when none is open.
	StartedAt time.Time
	UpdatedAt time.Time
	// Partitions of the current transaction, sorted by topic and partition.
	Partitions []TxnPartition
	// Consumer groups of the current transaction (AddOffsetsToTxn), sorted.
	Groups []string
}

// TxnPartition is one topic partition of a transaction.
type TxnPartition struct {
	Topic     string
	Partition int32
}

// TxnOffset is one offset staged by TxnOffsetCommit.
type TxnOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32
	Metadata    string
}

// InTx runs fn in one Postgres transaction, committed when fn returns nil and rolled
// back otherwise. ErrNotReady before the database is migrated.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if err := s.check(); err != nil {
		return err
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// LockTxn reads a transactional id's row under its row lock (FOR UPDATE), with its
// partitions and groups, in one round trip. ErrTxnNotFound when there is no row.
func LockTxn(ctx context.Context, tx pgx.Tx, id string) (*Txn, error) {
	return loadTxn(ctx, tx, id, true)
}

// ReadTxn is LockTxn without the row lock and outside a transaction (one round trip,
// one snapshot): the last committed state of the row, for a check that changes nothing
// (a verify-only AddPartitionsToTxn). ErrTxnNotFound when there is no row; ErrNotReady
// before the database is migrated.
func (s *Store) ReadTxn(ctx context.Context, id string) (*Txn, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return loadTxn(ctx, s.pool, id, false)
}

// rowQuerier is what loadTxn reads through: a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// loadTxn reads the row (FOR UPDATE with lock) with its partitions and groups.
func loadTxn(ctx context.Context, q rowQuerier, id string, lock bool) (*Txn, error) {
	return scanTxn(q.QueryRow(ctx, loadTxnSQL(lock), id), id)
}

// loadTxnSQL is loadTxn's query ($1: the transactional id).
func loadTxnSQL(lock bool) string {
	sql := `SELECT t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch, t.next_producer_id,
			t.state, t.timeout_ms, t.started_at, t.updated_at,
			COALESCE((SELECT array_agg(p.topic ORDER BY p.topic, p.partition) FROM transaction_partitions p
				WHERE p.transactional_id = t.transactional_id), '{}'),
			COALESCE((SELECT array_agg(p.partition ORDER BY p.topic, p.partition) FROM transaction_partitions p
				WHERE p.transactional_id = t.transactional_id), '{}'),
			COALESCE((SELECT array_agg(g.group_id ORDER BY g.group_id) FROM transaction_groups g
				WHERE g.transactional_id = t.transactional_id), '{}')
		FROM transactions t WHERE t.transactional_id = $1`
	if lock {
		sql += ` FOR UPDATE OF t`
	}
	return sql
}

// scanTxn scans loadTxnSQL's row.
func scanTxn(row pgx.Row, id string) (*Txn, error) {
	t := &Txn{ID: id}
	var (
		started *time.Time
		topics  []string
		parts   []int32
	)
	err := row.Scan(&t.ProducerID, &t.ProducerEpoch, &t.LastProducerID, &t.LastProducerEpoch, &t.NextProducerID, &t.State,
		&t.TimeoutMs, &started, &t.UpdatedAt, &topics, &parts, &t.Groups)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrTxnNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load transaction: %w", err)
	}
	if started != nil {
		t.StartedAt = *started
	}
	if len(topics) != len(parts) {
		return nil, fmt.Errorf("load transaction: %d topics for %d partitions", len(topics), len(parts))
	}
	for i := range topics {
		t.Partitions = append(t.Partitions, TxnPartition{Topic: topics[i], Partition: parts[i]})
	}
	if len(t.Groups) == 0 {
		t.Groups = nil
	}
	return t, nil
}

// CreateTxn inserts a new transactional id's row (with updated_at = now; no next
// producer id, t.NextProducerID is set to -1) and reports
// whether it did: false when the id has a row already (a concurrent call created it;
// the insert waits for that call's transaction to end, so under READ COMMITTED a
// LockTxn after it finds the row).
func CreateTxn(ctx context.Context, tx pgx.Tx, t *Txn, now time.Time) (bool, error) {
	t.UpdatedAt, t.NextProducerID = now, -1
	tag, err := tx.Exec(ctx, `INSERT INTO transactions (transactional_id, producer_id, producer_epoch, last_producer_id,
			last_producer_epoch, state, timeout_ms, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (transactional_id) DO NOTHING`,
		t.ID, t.ProducerID, t.ProducerEpoch, t.LastProducerID, t.LastProducerEpoch, t.State, t.TimeoutMs, now)
	if err != nil {
		return false, fmt.Errorf("create transaction: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// SaveTxn updates a transactional id's row (not its partitions or groups), with
// updated_at = now. The row exists: it was read by LockTxn or created by CreateTxn in
// the same transaction (a plain UPDATE, so no speculative insertion on the hot page).
func SaveTxn(ctx context.Context, tx pgx.Tx, t *Txn, now time.Time) error {
	sql, args := saveTxnSQL(t, now)
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("save transaction: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("save transaction %q: %w", t.ID, ErrTxnNotFound)
	}
	return nil
}

// saveTxnSQL is SaveTxn's statement (setting t.UpdatedAt = now).
func saveTxnSQL(t *Txn, now time.Time) (string, []any) {
	var started *time.Time
	if !t.StartedAt.IsZero() {
		started = &t.StartedAt
	}
	t.UpdatedAt = now
	return `UPDATE transactions SET producer_id = $2, producer_epoch = $3, last_producer_id = $4,
			last_producer_epoch = $5, state = $6, timeout_ms = $7, started_at = $8, updated_at = $9,
			next_producer_id = $10
		WHERE transactional_id = $1`,
		[]any{t.ID, t.ProducerID, t.ProducerEpoch, t.LastProducerID, t.LastProducerEpoch, t.State, t.TimeoutMs, started, now,
			t.NextProducerID}
}

// QuickAddTxnPartitions is AddPartitionsToTxn's common case in one statement and one
// round trip (its own Postgres transaction, committed synchronously): when every
// partition is of a registered topic and within its partition count, the row exists
// with producer id pid at epoch epoch, its state is Empty, Ongoing, CompleteCommit or
// CompleteAbort, and some partition is not yet in an Ongoing transaction, the partitions
// are added and the row made Ongoing (started_at = now unless it was Ongoing,
// updated_at = now), as LockTxn + AddTxnPartitions + SaveTxn would. The UPDATE waits
// for the row lock (a finisher's) and re-checks its conditions on the row it then
// finds. It reports whether it wrote; false changes nothing and leaves the answer
// (an error code, or nothing to add) to the locked path.
func (s *Store) QuickAddTxnPartitions(ctx context.Context, id string, pid int64, epoch int32, parts []TxnPartition, now time.Time) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	if len(parts) == 0 {
		return false, nil
	}
	topics := make([]string, len(parts))
	nums := make([]int32, len(parts))
	for i, p := range parts {
		topics[i], nums[i] = p.Topic, p.Partition
	}
	var n, locked int
	// lk waits for the row lock whatever the state its snapshot shows (a finisher
	// holds it while it writes the previous transaction's markers) and returns the row
	// as that finisher left it; the UPDATE then checks that latest state, not the
	// statement's snapshot. The partitions already in the transaction are read from the
	// snapshot: when stale (the row became Ongoing after the snapshot) they can only
	// make the statement write nothing and leave the answer to the locked path.
	err := s.pool.QueryRow(ctx, quickAddSQL(false), id, pid, epoch, topics, nums, now).Scan(&n, &locked)
	if err != nil {
		return false, fmt.Errorf("add transaction partitions: %w", err)
	}
	return n == 1, nil
}

// quickAddSQL is QuickAddTxnPartitions' statement ($1 id, $2 producer id, $3 epoch,
// $4 topics, $5 partitions, $6 now), answering the rows written (0 or 1) and the rows
// locked (0: no such row, or with skipLocked a row another transaction has locked,
// which is then left alone and not waited for).
func quickAddSQL(skipLocked bool) string {
	lock := ""
	if skipLocked {
		lock = " SKIP LOCKED"
	}
	return `WITH req AS (
			SELECT u.topic, u.partition FROM unnest($4::text[], $5::integer[]) AS u(topic, partition)
		), known AS (
			SELECT count(*) = cardinality($4::text[]) AS ok FROM req
			JOIN topics tp ON tp.name = req.topic AND req.partition >= 0 AND req.partition < tp.partitions
		), lk AS (
			SELECT transactional_id, producer_id, producer_epoch, state FROM transactions
			WHERE transactional_id = $1 FOR UPDATE` + lock + `
		), upd AS (
			UPDATE transactions t SET state = 'Ongoing', updated_at = $6,
				started_at = CASE WHEN lk.state = 'Ongoing' THEN t.started_at ELSE $6 END
			FROM known, lk
			WHERE known.ok AND t.transactional_id = lk.transactional_id AND lk.producer_id = $2 AND lk.producer_epoch = $3
			  AND lk.state IN ('Empty', 'Ongoing', 'CompleteCommit', 'CompleteAbort')
			  AND NOT (lk.state = 'Ongoing' AND NOT EXISTS (SELECT 1 FROM req WHERE NOT EXISTS (
				SELECT 1 FROM transaction_partitions p WHERE p.transactional_id = lk.transactional_id
				  AND p.topic = req.topic AND p.partition = req.partition)))
			RETURNING t.transactional_id
		), ins AS (
			INSERT INTO transaction_partitions (transactional_id, topic, partition)
			SELECT upd.transactional_id, req.topic, req.partition FROM upd, req
			ON CONFLICT DO NOTHING
		)
		SELECT (SELECT count(*) FROM upd), (SELECT count(*) FROM lk)`
}

// TxnAdd is one AddPartitionsToTxn of QuickAddTxnPartitionsBatch.
type TxnAdd struct {
	ID            string
	ProducerID    int64
	ProducerEpoch int32
	Partitions    []TxnPartition
}

// TxnAdded is the outcome of one TxnAdd: Added as QuickAddTxnPartitions' answer;
// Skipped when the row was not looked at (another transaction has it locked, or there
// is no row), so the add is still to be done.
type TxnAdded struct {
	Added   bool
	Skipped bool
}

// QuickAddTxnPartitionsBatch is QuickAddTxnPartitions for several adds in one Postgres
// transaction and one round trip (group commit: one synchronous COMMIT), except that
// a row another transaction has locked is not waited for (SKIP LOCKED; that add
// writes nothing and answers Skipped, for the caller to redo alone), so the batch
// never waits for a lock. It answers per add, in order; on an error nothing is
// written.
func (s *Store) QuickAddTxnPartitionsBatch(ctx context.Context, adds []TxnAdd, now time.Time) ([]TxnAdded, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]TxnAdded, len(adds))
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	sql := quickAddSQL(true)
	for _, a := range adds {
		if len(a.Partitions) == 0 {
			continue // nothing to add: false, as QuickAddTxnPartitions
		}
		topics := make([]string, len(a.Partitions))
		nums := make([]int32, len(a.Partitions))
		for i, p := range a.Partitions {
			topics[i], nums[i] = p.Topic, p.Partition
		}
		batch.Queue(sql, a.ID, a.ProducerID, a.ProducerEpoch, topics, nums, now)
	}
	batch.Queue(`COMMIT`)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	open := false
	defer func() {
		if open {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	br := conn.SendBatch(ctx, batch)
	open = true
	defer func() { _ = br.Close() }()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	for i, a := range adds {
		if len(a.Partitions) == 0 {
			continue
		}
		var n, locked int
		if err := br.QueryRow().Scan(&n, &locked); err != nil {
			return nil, fmt.Errorf("add transaction partitions: %w", err)
		}
		out[i] = TxnAdded{Added: n == 1, Skipped: locked == 0}
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	open = false
	return out, nil
}

// AddTxnPartitions adds partitions to a transaction (present ones are kept).
func AddTxnPartitions(ctx context.Context, tx pgx.Tx, id string, parts []TxnPartition) error {
	if len(parts) == 0 {
		return nil
	}
	topics := make([]string, len(parts))
	nums := make([]int32, len(parts))
	for i, p := range parts {
		topics[i], nums[i] = p.Topic, p.Partition
	}
	_, err := tx.Exec(ctx, `INSERT INTO transaction_partitions (transactional_id, topic, partition)
		SELECT $1, t, p FROM unnest($2::text[], $3::integer[]) AS u(t, p)
		ON CONFLICT DO NOTHING`, id, topics, nums)
	if err != nil {
		return fmt.Errorf("add transaction partitions: %w", err)
	}
	return nil
}

// AddTxnGroup adds a consumer group to a transaction (kept when present).
func AddTxnGroup(ctx context.Context, tx pgx.Tx, id, group string) error {
	if _, err := tx.Exec(ctx, `INSERT INTO transaction_groups (transactional_id, group_id) VALUES ($1, $2)
		ON CONFLICT DO NOTHING`, id, group); err != nil {
		return fmt.Errorf("add transaction group: %w", err)
	}
	return nil
}

// StageTxnOffsets stages offsets of group in a transaction; a partition staged
// before is replaced.
func StageTxnOffsets(ctx context.Context, tx pgx.Tx, id, group string, offs []TxnOffset, now time.Time) error {
	batch := &pgx.Batch{}
	for _, o := range offs {
		batch.Queue(`INSERT INTO transaction_offsets (transactional_id, group_id, topic, partition, committed_offset,
				leader_epoch, metadata, commit_time) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (transactional_id, group_id, topic, partition) DO UPDATE SET committed_offset = $5,
				leader_epoch = $6, metadata = $7, commit_time = $8`,
			id, group, o.Topic, o.Partition, o.Offset, o.LeaderEpoch, o.Metadata, now)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("stage transaction offsets: %w", err)
	}
	return nil
}

// ClearTxn ends a transaction's bookkeeping in one round trip: with commit, its staged
// offsets become the groups' committed offsets (a group without a row is created
// Empty, as an OffsetCommit outside group management would); then its partitions,
// and with withGroups its groups and staged offsets, are removed. withGroups may be
// false only when the transaction has no groups (then it has no staged offsets).
func ClearTxn(ctx context.Context, tx pgx.Tx, id string, commit, withGroups bool) error {
	batch := &pgx.Batch{}
	queueClearTxn(batch, id, commit, withGroups)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("clear transaction: %w", err)
	}
	return nil
}

// queueClearTxn queues ClearTxn's statements.
func queueClearTxn(batch *pgx.Batch, id string, commit, withGroups bool) {
	if withGroups {
		if commit {
			batch.Queue(`INSERT INTO consumer_groups (group_id, state, empty_since)
				SELECT DISTINCT group_id, 'Empty', now() FROM transaction_offsets WHERE transactional_id = $1
				ON CONFLICT (group_id) DO NOTHING`, id)
			batch.Queue(`INSERT INTO consumer_group_offsets (group_id, topic, partition, committed_offset,
					leader_epoch, metadata, commit_time)
				SELECT group_id, topic, partition, committed_offset, leader_epoch, metadata, commit_time
				FROM transaction_offsets WHERE transactional_id = $1
				ON CONFLICT (group_id, topic, partition) DO UPDATE SET committed_offset = EXCLUDED.committed_offset,
					leader_epoch = EXCLUDED.leader_epoch, metadata = EXCLUDED.metadata, commit_time = EXCLUDED.commit_time`, id)
		}
		batch.Queue(`DELETE FROM transaction_offsets WHERE transactional_id = $1`, id)
		batch.Queue(`DELETE FROM transaction_groups WHERE transactional_id = $1`, id)
	}
	batch.Queue(`DELETE FROM transaction_partitions WHERE transactional_id = $1`, id)
}

// FinishTxn runs a finisher's Postgres transaction on transactional id id in two round
// trips around fn: BEGIN and the row read under its lock (LockTxn) in the first; then,
// when fn returns save, ClearTxn's statements (commit, with the groups when the row has
// any) and SaveTxn of the row as fn left it (updated_at = now()), and COMMIT in the
// second. Without save, or on an error, the transaction is rolled back. The commit does
// not wait for its WAL flush (synchronous_commit off for this transaction only): a
// finisher's writes are redone from durable state after a crash, and a later
// synchronous commit flushes them first, so only a suffix of such writes can ever be
// lost. ErrTxnNotFound when there is no row; ErrNotReady before the database is
// migrated.
func (s *Store) FinishTxn(ctx context.Context, id string, now func() time.Time, fn func(t *Txn) (save, commit bool, err error)) error {
	if err := s.check(); err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	// A connection released inside a transaction (a failed ROLLBACK) is closed by the
	// pool, never reused.
	defer conn.Release()
	open := false
	defer func() {
		if open {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	batch := &pgx.Batch{}
	batch.Queue(`BEGIN`)
	batch.Queue(`SET LOCAL synchronous_commit = off`)
	batch.Queue(loadTxnSQL(true), id)
	br := conn.SendBatch(ctx, batch)
	open = true
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("set synchronous_commit: %w", err)
	}
	t, err := scanTxn(br.QueryRow(), id)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("load transaction: %w", cerr)
	}
	if err != nil {
		return err
	}
	withGroups := len(t.Groups) > 0
	save, commit, err := fn(t)
	if err != nil || !save {
		return err
	}
	batch = &pgx.Batch{}
	queueClearTxn(batch, t.ID, commit, withGroups)
	clears := batch.Len()
	sql, args := saveTxnSQL(t, now())
	batch.Queue(sql, args...)
	batch.Queue(`COMMIT`)
	br = conn.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for i := 0; i < clears; i++ {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("clear transaction: %w", err)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return fmt.Errorf("save transaction: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("save transaction %q: %w", t.ID, ErrTxnNotFound)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	open = false
	return nil
}

// Decision is an EndTxn decision FinishTxns stores before it locks its rows: under
// these conditions (the row has producer id ProducerID at epoch
// ProducerEpoch, is Ongoing, has no consumer group and no next producer id, and with
// Bump its epoch is not exhausted) the state becomes Prepare and, with Bump, the epoch
// is bumped, as EndTxn's locked path would.
type Decision struct {
	ID            string
	ProducerID    int64
	ProducerEpoch int32
	Prepare       string
	Bump          bool
}

// Decided is the outcome of one Decision: whether it was stored (durably) and the
// producer id and epoch after it.
type Decided struct {
	OK            bool
	ProducerID    int64
	ProducerEpoch int32
}

// FinishTxns is FinishTxn for several transactional ids in one Postgres transaction
// (group commit of concurrent finishers), after storing decisions (EndTxn's, in a
// Postgres transaction of their own, committed synchronously) in the same round trip.
//
// The first round trip stores ds (their rows locked in id order with SKIP LOCKED: a
// row another holder has locked is not decided here), commits them, then BEGINs and
// reads the rows of ids in Prepare* (the only ones a finish changes) under their
// locks, again in id order with SKIP LOCKED, so the
// call never waits for another holder's lock and, as it locks in one order, cannot
// form a cycle with another such call or with a holder of one id (the ids it skips,
// and ids without a row, are not passed to fn and are left to the caller). decided
// (when ds is not empty) is called once with one Decided per decision, in order, as
// soon as they are durable, or with the error that kept them from being stored (then
// none was). fn gets the locked rows (sorted by id) and answers, per row, whether to
// save it (and whether it committed); then the saved rows' ClearTxn statements and
// SaveTxn, and COMMIT, go in the second round trip (synchronous_commit off, as
// FinishTxn). A row fn does not save is left as it was. Without any row to save, or on
// an error, that transaction is rolled back. ErrNotReady before the database is
// migrated.
func (s *Store) FinishTxns(ctx context.Context, ds []Decision, ids []string, now func() time.Time, decided func([]Decided, error), fn func(ts []*Txn) (save, commit []bool, err error)) error {
	decide := func(out []Decided, err error) {
		if decided != nil && len(ds) > 0 {
			decided(out, err)
			decided = nil
		}
	}
	defer decide(nil, errors.New("finish transactions: decisions not stored"))
	if err := s.check(); err != nil {
		decide(nil, err)
		return err
	}
	if len(ids) == 0 && len(ds) == 0 {
		return nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		err = fmt.Errorf("acquire connection: %w", err)
		decide(nil, err)
		return err
	}
	defer conn.Release()
	open := false
	defer func() {
		if open {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	batch := &pgx.Batch{}
	if len(ds) > 0 {
		n := len(ds)
		dids, pids, epochs, prepares, bumps := make([]string, n), make([]int64, n), make([]int32, n), make([]string, n), make([]bool, n)
		for i, d := range ds {
			dids[i], pids[i], epochs[i], prepares[i], bumps[i] = d.ID, d.ProducerID, d.ProducerEpoch, d.Prepare, d.Bump
		}
		batch.Queue(`BEGIN`)
		batch.Queue(decideTxnsSQL, dids, pids, epochs, prepares, bumps, now())
		batch.Queue(`COMMIT`)
	}
	batch.Queue(`BEGIN`)
	batch.Queue(`SET LOCAL synchronous_commit = off`)
	batch.Queue(loadTxnsSQL, ids)
	br := conn.SendBatch(ctx, batch)
	open = true
	if len(ds) > 0 {
		out, err := readDecided(br, ds)
		if err != nil {
			_ = br.Close()
			decide(nil, err)
			return err
		}
		decide(out, nil)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("begin: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("set synchronous_commit: %w", err)
	}
	ts, err := scanTxns(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("load transactions: %w", cerr)
	}
	if err != nil {
		return err
	}
	withGroups := make([]bool, len(ts))
	for i, t := range ts {
		withGroups[i] = len(t.Groups) > 0
	}
	save, commit, err := fn(ts)
	if err != nil {
		return err
	}
	if len(save) != len(ts) || len(commit) != len(ts) {
		return fmt.Errorf("finish transactions: %d answers for %d rows", len(save), len(ts))
	}
	batch = &pgx.Batch{}
	saved := 0
	for i, t := range ts {
		if !save[i] {
			continue
		}
		queueClearTxn(batch, t.ID, commit[i], withGroups[i])
		sql, args := saveTxnSQL(t, now())
		batch.Queue(sql, args...)
		saved++
	}
	if saved == 0 {
		return nil
	}
	batch.Queue(`COMMIT`)
	n := batch.Len()
	br = conn.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for i := 0; i < n-1; i++ {
		tag, err := br.Exec()
		if err != nil {
			return fmt.Errorf("finish transactions: %w", err)
		}
		if tag.Update() && tag.RowsAffected() != 1 {
			return fmt.Errorf("save transaction: %w", ErrTxnNotFound)
		}
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	open = false
	return nil
}

// decideTxnsSQL stores FinishTxns' decisions ($1..$5: ids, producer ids, epochs,
// Prepare states, bumps; $6: now), EndTxn's common case for several rows in one statement, each
// locked first (in id order, skipping a row another holder has locked), and returns
// the decided rows' ids, producer ids and epochs.
const decideTxnsSQL = `WITH d AS (
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::text[], $5::boolean[]) AS d(id, pid, epoch, prepare, bump)
	), lk AS (
		SELECT t.transactional_id FROM transactions t WHERE t.transactional_id = ANY($1::text[])
		ORDER BY t.transactional_id FOR UPDATE SKIP LOCKED
	)
	UPDATE transactions t SET state = d.prepare, updated_at = $6,
		last_producer_id = CASE WHEN d.bump THEN t.producer_id ELSE t.last_producer_id END,
		last_producer_epoch = CASE WHEN d.bump THEN t.producer_epoch ELSE t.last_producer_epoch END,
		producer_epoch = CASE WHEN d.bump THEN t.producer_epoch + 1 ELSE t.producer_epoch END
	FROM d, lk
	WHERE t.transactional_id = lk.transactional_id AND d.id = lk.transactional_id
	  AND t.producer_id = d.pid AND t.producer_epoch = d.epoch AND t.state = 'Ongoing'
	  AND t.next_producer_id < 0 AND (NOT d.bump OR t.producer_epoch < 32766)
	  AND NOT EXISTS (SELECT 1 FROM transaction_groups g WHERE g.transactional_id = t.transactional_id)
	RETURNING t.transactional_id, t.producer_id, t.producer_epoch`

// readDecided reads the BEGIN, decideTxnsSQL and COMMIT results of FinishTxns' first
// round trip: one Decided per decision of ds, stored once COMMIT has answered.
func readDecided(br pgx.BatchResults, ds []Decision) ([]Decided, error) {
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("decide transactions: %w", err)
	}
	got := make(map[string]Decided, len(ds))
	for rows.Next() {
		var (
			id string
			d  Decided
		)
		if err := rows.Scan(&id, &d.ProducerID, &d.ProducerEpoch); err != nil {
			rows.Close()
			return nil, fmt.Errorf("decide transactions: %w", err)
		}
		d.OK = true
		got[id] = d
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("decide transactions: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("commit decisions: %w", err)
	}
	out := make([]Decided, len(ds))
	for i, d := range ds {
		out[i] = got[d.ID]
		delete(got, d.ID) // an id decided once answers its first decision only
	}
	return out, nil
}

// loadTxnsSQL is FinishTxns' locked read ($1: the ids): loadTxnSQL's columns after
// the id, for every row of $1 in Prepare* not locked by another transaction, locked in
// id order.
var loadTxnsSQL = `SELECT t.transactional_id, t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch,
		t.next_producer_id, t.state, t.timeout_ms, t.started_at, t.updated_at,
		COALESCE((SELECT array_agg(p.topic ORDER BY p.topic, p.partition) FROM transaction_partitions p
			WHERE p.transactional_id = t.transactional_id), '{}'),
		COALESCE((SELECT array_agg(p.partition ORDER BY p.topic, p.partition) FROM transaction_partitions p
			WHERE p.transactional_id = t.transactional_id), '{}'),
		COALESCE((SELECT array_agg(g.group_id ORDER BY g.group_id) FROM transaction_groups g
			WHERE g.transactional_id = t.transactional_id), '{}')
	FROM transactions t WHERE t.transactional_id = ANY($1::text[]) AND t.state IN ('PrepareCommit', 'PrepareAbort')
	ORDER BY t.transactional_id
	FOR UPDATE OF t SKIP LOCKED`

// scanTxns scans loadTxnsSQL's rows.
func scanTxns(br pgx.BatchResults) ([]*Txn, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("load transactions: %w", err)
	}
	defer rows.Close()
	var ts []*Txn
	for rows.Next() {
		t := &Txn{}
		var (
			started *time.Time
			topics  []string
			parts   []int32
		)
		if err := rows.Scan(&t.ID, &t.ProducerID, &t.ProducerEpoch, &t.LastProducerID, &t.LastProducerEpoch, &t.NextProducerID,
			&t.State, &t.TimeoutMs, &started, &t.UpdatedAt, &topics, &parts, &t.Groups); err != nil {
			return nil, fmt.Errorf("load transactions: %w", err)
		}
		if started != nil {
			t.StartedAt = *started
		}
		if len(topics) != len(parts) {
			return nil, fmt.Errorf("load transaction %q: %d topics for %d partitions", t.ID, len(topics), len(parts))
		}
		for i := range topics {
			t.Partitions = append(t.Partitions, TxnPartition{Topic: topics[i], Partition: parts[i]})
		}
		if len(t.Groups) == 0 {
			t.Groups = nil
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load transactions: %w", err)
	}
	return ts, nil
}

// OpenTxn is a transaction the sweep looks at.
type OpenTxn struct {
	ID        string
	State     string
	TimeoutMs int32
	StartedAt time.Time
	UpdatedAt time.Time
}

// ListOpenTxns returns the transactions that are Ongoing or Prepare* (unlocked).
func (s *Store) ListOpenTxns(ctx context.Context) ([]OpenTxn, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT transactional_id, state, timeout_ms, COALESCE(started_at, updated_at), updated_at
		FROM transactions WHERE state IN ('Ongoing', 'PrepareCommit', 'PrepareAbort')`)
	if err != nil {
		return nil, fmt.Errorf("list open transactions: %w", err)
	}
	defer rows.Close()
	var out []OpenTxn
	for rows.Next() {
		var o OpenTxn
		if err := rows.Scan(&o.ID, &o.State, &o.TimeoutMs, &o.StartedAt, &o.UpdatedAt); err != nil {
			return nil, fmt.Errorf("scan open transaction: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// Querier is what PendingTxnOffsets reads through: a pool or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PendingTxnOffsets returns the partitions of group with offsets staged by a
// transaction that has not ended (KIP-447 require_stable).
func PendingTxnOffsets(ctx context.Context, q Querier, group string) (map[TxnPartition]bool, error) {
	rows, err := q.Query(ctx, `SELECT topic, partition FROM transaction_offsets WHERE group_id = $1`, group)
	if err != nil {
		return nil, fmt.Errorf("read pending transaction offsets: %w", err)
	}
	defer rows.Close()
	out := map[TxnPartition]bool{}
	for rows.Next() {
		var p TxnPartition
		if err := rows.Scan(&p.Topic, &p.Partition); err != nil {
			return nil, fmt.Errorf("scan pending transaction offset: %w", err)
		}
		out[p] = true
	}
	return out, rows.Err()
}

// TxnRow is one transactional id as the admin APIs show it, read without a lock.
type TxnRow struct {
	ID            string
	ProducerID    int64
	ProducerEpoch int32
	State         string
	TimeoutMs     int32
	// Zero when no transaction is open.
	StartedAt  time.Time
	Partitions []TxnPartition
}

// DescribeTxns returns the rows of ids that exist, with their partitions, by id.
func (s *Store) DescribeTxns(ctx context.Context, ids []string) (map[string]*TxnRow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := map[string]*TxnRow{}
	rows, err := s.pool.Query(ctx, `SELECT transactional_id, producer_id, producer_epoch, state, timeout_ms, started_at
		FROM transactions WHERE transactional_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	for rows.Next() {
		r := &TxnRow{}
		var started *time.Time
		if err := rows.Scan(&r.ID, &r.ProducerID, &r.ProducerEpoch, &r.State, &r.TimeoutMs, &started); err != nil {
			rows.Close()
			return nil, fmt.Errorf("scan transaction: %w", err)
		}
		if started != nil {
			r.StartedAt = *started
		}
		out[r.ID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe transactions: %w", err)
	}
	rows, err = s.pool.Query(ctx, `SELECT transactional_id, topic, partition FROM transaction_partitions
		WHERE transactional_id = ANY($1) ORDER BY transactional_id, topic, partition`, ids)
	if err != nil {
		return nil, fmt.Errorf("describe transaction partitions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var p TxnPartition
		if err := rows.Scan(&id, &p.Topic, &p.Partition); err != nil {
			return nil, fmt.Errorf("scan transaction partition: %w", err)
		}
		if r := out[id]; r != nil {
			r.Partitions = append(r.Partitions, p)
		}
	}
	return out, rows.Err()
}

// ListTxns returns every transactional id (without partitions), sorted by id, whose
// state is in states (any when empty), producer id in pids (any when empty), and, with
// openSince non-zero, whose open transaction started at or before openSince.
func (s *Store) ListTxns(ctx context.Context, states []string, pids []int64, openSince time.Time) ([]*TxnRow, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var since *time.Time
	if !openSince.IsZero() {
		since = &openSince
	}
	rows, err := s.pool.Query(ctx, `SELECT transactional_id, producer_id, producer_epoch, state, timeout_ms, started_at
		FROM transactions
		WHERE (COALESCE(cardinality($1::text[]), 0) = 0 OR state = ANY($1))
		  AND (COALESCE(cardinality($2::bigint[]), 0) = 0 OR producer_id = ANY($2))
		  AND ($3::timestamptz IS NULL OR started_at <= $3)
		ORDER BY transactional_id`, states, pids, since)
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	defer rows.Close()
	var out []*TxnRow
	for rows.Next() {
		r := &TxnRow{}
		var started *time.Time
		if err := rows.Scan(&r.ID, &r.ProducerID, &r.ProducerEpoch, &r.State, &r.TimeoutMs, &started); err != nil {
			return nil, fmt.Errorf("scan transaction: %w", err)
		}
		if started != nil {
			r.StartedAt = *started
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ExpireTxns deletes the transactional ids with no open transaction (Empty,
// CompleteCommit, CompleteAbort) not used since before (Kafka's
// transactional.id.expiration.ms) and returns how many. A row changed meanwhile under
// its lock is re-checked by Postgres and kept.
func (s *Store) ExpireTxns(ctx context.Context, before time.Time) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM transactions
		WHERE state IN ('Empty', 'CompleteCommit', 'CompleteAbort') AND updated_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("expire transactional ids: %w", err)
	}
	return tag.RowsAffected(), nil
}
