package txn

import (
	"context"

	"github.com/tributary/tributary/services/coordinator/internal/store"
)

// Group commit of AddPartitionsToTxn's common case: the adds queued while the add
// runners (at most maxAddRunners) are busy go together in one Postgres transaction and
// one round trip (store.QuickAddTxnPartitionsBatch: one synchronous commit for all,
// each row locked with SKIP LOCKED, so a batch never waits for a lock). An add the
// batch did not write (a state the one statement does not
// take) is answered by AddPartitions' locked path; one it skipped (a row locked
// elsewhere) is redone alone (QuickAddTxnPartitions, which waits for the lock), and
// so is every add of a failed batch.
const (
	maxAddRunners = 2
	maxAddBatch   = 64
)

// addReq is one queued add.
type addReq struct {
	add  store.TxnAdd
	res  store.TxnAdded
	err  error
	done chan struct{}
}

// quickAddBatched is QuickAddTxnPartitions through the add batches: whether the add
// was written (durably) and, when not, whether the batch skipped it (to be redone
// alone); neither leaves the answer to the locked path.
func (c *Coordinator) quickAddBatched(ctx context.Context, add store.TxnAdd) (store.TxnAdded, error) {
	r := &addReq{add: add, done: make(chan struct{})}
	c.amu.Lock()
	c.aqueue = append(c.aqueue, r)
	start := c.arunners < maxAddRunners
	if start {
		c.arunners++
		c.bg.Add(1)
	}
	c.amu.Unlock()
	if start {
		go c.runAdds(context.WithoutCancel(ctx))
	}
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		return store.TxnAdded{}, ctx.Err()
	}
}

// runAdds runs batches of queued adds until the queue is empty.
func (c *Coordinator) runAdds(ctx context.Context) {
	defer c.bg.Done()
	for {
		c.amu.Lock()
		n := min(len(c.aqueue), maxAddBatch)
		if n == 0 {
			c.arunners--
			c.amu.Unlock()
			return
		}
		batch := append([]*addReq(nil), c.aqueue[:n]...)
		c.aqueue = append(c.aqueue[:0], c.aqueue[n:]...)
		c.amu.Unlock()
		c.addBatch(ctx, batch)
	}
}

// addBatch writes a batch of adds; on an error none is written and each answers
// skipped (so it is redone alone).
func (c *Coordinator) addBatch(ctx context.Context, batch []*addReq) {
	ctx, cancel := context.WithTimeout(ctx, coordCallTimeout)
	defer cancel()
	adds := make([]store.TxnAdd, len(batch))
	for i, r := range batch {
		adds[i] = r.add
	}
	added, err := c.store.QuickAddTxnPartitionsBatch(ctx, adds, c.now())
	for i, r := range batch {
		r.res = store.TxnAdded{Skipped: true}
		if err == nil {
			r.res = added[i]
		}
		close(r.done)
	}
}
