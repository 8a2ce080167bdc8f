package txn

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Group commit of the finishes EndTxn leaves running after its answer: the finishes
// queued while finishers are busy go together, in one Postgres transaction
// (store.FinishTxns: the rows locked in id order, skipping a row another holder has
// locked) and one WriteMarkers call for all their markers, instead of a Postgres
// transaction, a pooled connection held across the markers and a storage-core call
// each. At most maxFinishRunners batches run at once; a batch takes at most
// maxFinishBatch finishes. A finish whose row the batch could not lock is done on its
// own (finishLocked, which waits for the lock), at once.
const (
	maxFinishRunners = 2
	maxFinishBatch   = 64
	// maxMarkersPerCall bounds one WriteMarkers call of a batch (storage-core takes
	// at most 10,000 markers a call); a batch with more makes several calls.
	maxMarkersPerCall = 4096
)

// finishReq is one queued finish.
type finishReq struct {
	tid string
	// decide, when set, is EndTxn's decision, stored by the batch first (in the same
	// round trip); res and err are its outcome, set before decided is closed.
	decide  *store.Decision
	decided chan struct{}
	res     store.Decided
	err     error
	locked  chan struct{} // closed once its row is locked for the finish (or it failed)
	done    chan struct{} // closed once the finish has ended, written or not
}

// finishAfterAnswer finishes tid's Prepare* transaction in the background and returns
// once the finisher holds the row lock (or has failed to take it), so every later call
// on the id, which takes the lock first, waits for the markers and meets Complete*
// (Kafka answers EndTxn once the decision is durable too, and the producer's next
// AddPartitionsToTxn meets the end). Concurrent finishes are grouped (see above). The
// finish outlives ctx's cancellation (not its values), bounded by finishTimeout; Close
// waits for it. Until it ends, this coordinator's own later calls on tid wait for it
// without a pooled connection (waitFinish) before they take the row lock.
func (c *Coordinator) finishAfterAnswer(ctx context.Context, tid string) {
	r := &finishReq{tid: tid, locked: make(chan struct{}), done: make(chan struct{})}
	c.enqueueFinish(ctx, r)
	select {
	case <-r.locked:
	case <-r.done:
	}
}

// decideAndFinish is EndTxn's common case through the batches: the decision d is
// stored by the next batch (with the others queued with it, in one synchronous
// Postgres commit, in the round trip that then locks the rows to finish) and, when it
// was stored, the transaction is finished as by finishAfterAnswer. It returns the
// decision's outcome once durable and the row locked for the finish; not OK leaves
// the answer to EndTxn's locked path (which takes a decision stored by a batch whose
// COMMIT answer was lost for a retry).
func (c *Coordinator) decideAndFinish(ctx context.Context, d store.Decision) (store.Decided, error) {
	r := &finishReq{tid: d.ID, decide: &d, decided: make(chan struct{}), locked: make(chan struct{}), done: make(chan struct{})}
	c.enqueueFinish(ctx, r)
	select {
	case <-r.decided:
	case <-ctx.Done():
		return store.Decided{}, ctx.Err()
	}
	if r.err != nil || !r.res.OK {
		return r.res, r.err
	}
	select {
	case <-r.locked:
	case <-r.done:
	}
	return r.res, nil
}

// enqueueFinish queues r and starts a runner when fewer than maxFinishRunners run.
func (c *Coordinator) enqueueFinish(ctx context.Context, r *finishReq) {
	tid := r.tid
	c.fmu.Lock()
	if c.finishing == nil {
		c.finishing = map[string]chan struct{}{}
	}
	c.finishing[tid] = r.done
	c.fqueue = append(c.fqueue, r)
	start := c.frunners < maxFinishRunners
	if start {
		c.frunners++
		c.bg.Add(1)
	}
	c.fmu.Unlock()
	if start {
		go c.runFinishes(context.WithoutCancel(ctx))
	}
}

// waitFinish waits (without holding a connection) for this coordinator's running
// finish of tid, if any, so that the call that follows does not hold a pooled
// connection while it waits for the finisher's row lock. The row lock still orders
// the calls: this only moves the wait out of Postgres.
func (c *Coordinator) waitFinish(ctx context.Context, tid string) {
	c.fmu.Lock()
	done := c.finishing[tid]
	c.fmu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// finishRunning reports whether a finish of tid runs (or is queued) in this process.
func (c *Coordinator) finishRunning(tid string) bool {
	c.fmu.Lock()
	defer c.fmu.Unlock()
	return c.finishing[tid] != nil
}

// runFinishes runs batches of queued finishes until the queue is empty.
func (c *Coordinator) runFinishes(ctx context.Context) {
	defer c.bg.Done()
	for {
		c.fmu.Lock()
		n := min(len(c.fqueue), maxFinishBatch)
		if n == 0 {
			c.frunners--
			c.fmu.Unlock()
			return
		}
		batch := append([]*finishReq(nil), c.fqueue[:n]...)
		c.fqueue = append(c.fqueue[:0], c.fqueue[n:]...)
		c.fmu.Unlock()
		c.finishBatch(ctx, batch)
	}
}

// ended closes r.done (r.locked too, when not yet) and forgets r's running finish.
func (c *Coordinator) ended(r *finishReq, lockedClosed bool) {
	if !lockedClosed {
		close(r.locked)
	}
	c.fmu.Lock()
	if c.finishing[r.tid] == r.done {
		delete(c.finishing, r.tid)
	}
	c.fmu.Unlock()
	close(r.done)
}

// finishBatch stores the batch's decisions and finishes its transactions (see the
// top of this file).
func (c *Coordinator) finishBatch(ctx context.Context, batch []*finishReq) {
	ctx, cancel := context.WithTimeout(ctx, finishTimeout)
	defer cancel()
	byID := make(map[string][]*finishReq, len(batch))
	ids := make([]string, 0, len(batch))
	var (
		ds    []store.Decision
		dreqs []*finishReq
	)
	decidedID := map[string]bool{}
	for _, r := range batch {
		if r.decide != nil {
			if decidedID[r.tid] {
				// One decision per id in a batch (a retried EndTxn): this one goes
				// the locked path, which recognises the retry.
				close(r.decided)
				c.ended(r, false)
				continue
			}
			decidedID[r.tid] = true
			ds = append(ds, *r.decide)
			dreqs = append(dreqs, r)
		}
		if _, ok := byID[r.tid]; !ok {
			ids = append(ids, r.tid)
		}
		byID[r.tid] = append(byID[r.tid], r)
	}
	decided := func(out []store.Decided, err error) {
		if err != nil {
			// The one statement failed for every decision of the batch (one id
			// Postgres cannot take, such as one with a NUL byte, fails them all):
			// none was stored, or, when only COMMIT's answer was lost, all were.
			// Each goes EndTxn's locked path on its own, which stores its decision
			// or recognises the stored one as a retry; only a failure of its own
			// then fails its EndTxn.
			c.log.Warn("could not store a batch of EndTxn decisions; each is decided alone",
				zap.Int("decisions", len(dreqs)), zap.Error(err))
			out, err = make([]store.Decided, len(dreqs)), nil
		}
		for i, r := range dreqs {
			if err == nil {
				r.res = out[i]
			}
			r.err = err
			if err != nil || !r.res.OK {
				// Not decided here: nothing to finish for it (its EndTxn takes the
				// locked path, which finishes what it decides).
				rs := byID[r.tid][:0]
				for _, o := range byID[r.tid] {
					if o != r {
						rs = append(rs, o)
					}
				}
				byID[r.tid] = rs
				// Ended before its EndTxn goes on, so that nothing (the sweep, a
				// later call's waitFinish) takes this for a running finish.
				c.ended(r, false)
			}
			close(r.decided)
		}
	}
	lockedIDs := make(map[string]bool, len(ids))
	locked := false
	var saved []string // rows whose markers were all written, to complete
	err := c.store.FinishTxns(ctx, ds, ids, c.now, decided, func(ts []*store.Txn) ([]bool, []bool, error) {
		locked = true
		for _, t := range ts {
			lockedIDs[t.ID] = true
			for _, r := range byID[t.ID] {
				close(r.locked)
			}
		}
		// Rows another holder has locked (or that left Prepare* meanwhile): on their
		// own, now.
		for _, id := range ids {
			if !lockedIDs[id] && len(byID[id]) > 0 {
				c.finishAlone(ctx, byID[id])
				delete(byID, id)
			}
		}
		save, commit, err := c.finishRows(ctx, ts)
		if err == nil {
			for i, t := range ts {
				if save[i] {
					saved = append(saved, t.ID)
				}
			}
		}
		return save, commit, err
	})
	if err != nil {
		c.log.Warn("could not finish transaction markers", zap.Int("transactions", len(lockedIDs)), zap.Error(err))
	}
	if err != nil && !locked {
		// Failed before any row was locked (the decisions' statement, which the
		// batch's finishes share a round trip with, or the connection): the
		// finishes of transactions decided already are done on their own rather
		// than left to the producer's next call or a sweep.
		for id, rs := range byID {
			if len(rs) > 0 {
				c.finishAlone(ctx, rs)
			}
			delete(byID, id)
		}
	}
	if err != nil {
		// The one Postgres transaction failed after the markers of the saved rows
		// were written (one row's write failing fails them all, as could the
		// COMMIT): each is completed on its own (its markers written again, which
		// is harmless), so that only a row failing alone stays Prepare*.
		for _, id := range saved {
			if rs := byID[id]; len(rs) > 0 {
				c.completeAlone(ctx, rs)
			}
			delete(byID, id)
		}
	}
	for id, rs := range byID {
		for _, r := range rs {
			c.ended(r, lockedIDs[id])
		}
	}
}

// completeAlone finishes (finish) the requests of one id whose row lock a failed batch
// held, in the background, bounded by finishTimeout; their locked is closed already.
func (c *Coordinator) completeAlone(ctx context.Context, rs []*finishReq) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		if _, err := c.finish(ctx, rs[0].tid); err != nil {
			c.log.Warn("could not finish transaction markers", zap.String("transactional_id", rs[0].tid), zap.Error(err))
		}
		for _, r := range rs {
			c.ended(r, true)
		}
	}()
}

// finishAlone finishes the requests of one id on their own (finishLocked), in the
// background, bounded by finishTimeout (not by the batch's context).
func (c *Coordinator) finishAlone(ctx context.Context, rs []*finishReq) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		lockedClosed := false
		_, err := c.finishLocked(ctx, rs[0].tid, func() {
			for _, r := range rs {
				close(r.locked)
			}
			lockedClosed = true
		})
		if err != nil {
			c.log.Warn("could not finish transaction markers", zap.String("transactional_id", rs[0].tid), zap.Error(err))
		}
		for _, r := range rs {
			c.ended(r, lockedClosed)
		}
	}()
}

// finishRows writes the markers of the locked rows' Prepare* transactions (in as few
// WriteMarkers calls as maxMarkersPerCall allows) and completes each whose markers are
// all written; a row in another state, or with a marker not written, is left as it is.
// It answers FinishTxns' save and commit per row; a failed call fails the whole batch
// (every row stays Prepare*, finished later).
func (c *Coordinator) finishRows(ctx context.Context, ts []*store.Txn) (save, commit []bool, err error) {
	save, commit = make([]bool, len(ts)), make([]bool, len(ts))
	type span struct{ row, from, to int }
	var (
		markers []Marker
		spans   []span
	)
	for i, t := range ts {
		if t.State != StatePrepareCommit && t.State != StatePrepareAbort {
			continue
		}
		ms := markersOf(t)
		spans = append(spans, span{i, len(markers), len(markers) + len(ms)})
		markers = append(markers, ms...)
	}
	codes := make([]int16, 0, len(markers))
	for from := 0; from < len(markers); {
		to := min(from+maxMarkersPerCall, len(markers))
		mctx, cancel := context.WithTimeout(ctx, markerTimeout)
		cs, err := c.markers.WriteMarkers(mctx, markers[from:to])
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrMarkers, err)
		}
		if len(cs) != to-from {
			return nil, nil, fmt.Errorf("%w: %d codes for %d markers", ErrMarkers, len(cs), to-from)
		}
		codes = append(codes, cs...)
		from = to
	}
	for _, sp := range spans {
		t := ts[sp.row]
		if err := c.checkMarkerCodes(t.ID, markers[sp.from:sp.to], codes[sp.from:sp.to]); err != nil {
			if !errors.Is(err, ErrMarkers) {
				return nil, nil, err
			}
			c.log.Warn("could not finish transaction markers", zap.String("transactional_id", t.ID), zap.Error(err))
			continue
		}
		commit[sp.row] = t.State == StatePrepareCommit
		complete(t)
		save[sp.row] = true
	}
	return save, commit, nil
}
