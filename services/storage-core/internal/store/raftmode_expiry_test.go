package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestRaftModeProducerExpiry: producer-state expiry is the leader's decision, proposed
// as an entry: a follower decides nothing, the leader's clock past
// producer.id.expiration.ms expires the idle producers on every replica alike but one
// with an ongoing transaction, and an expiry entry naming a producer that appended
// after the decision leaves it. An expired producer's old batch is no duplicate any
// more (appended anew on every node).
func TestRaftModeProducerExpiry(t *testing.T) {
	c := newRaftCluster(t)
	const ch = "raft.expiry"
	group := c.create(ch)
	lead := c.leader(group)
	ll := c.st[lead].mustGet(t, ch)
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 11, epoch: 0, seq: 0}, "p11"))
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 12, epoch: 0, seq: 0, txn: true}, "p12"))
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 13, epoch: 0, seq: 0}, "p13"))
	c.sameBytes(ch, 3)
	producersAre := func(want ...int64) {
		t.Helper()
		c.eventually(func() error {
			for id, s := range c.st {
				var got []int64
				for _, p := range s.mustGet(t, ch).Producers() {
					got = append(got, p.ID)
				}
				if !reflect.DeepEqual(got, want) {
					return fmt.Errorf("node %d producers %v, want %v", id, got, want)
				}
			}
			return nil
		})
	}
	producersAre(11, 12, 13)
	later := time.Now().UnixMilli() + producerExpiryMs + 60_000
	for id, s := range c.st {
		if id != lead {
			s.mustGet(t, ch).raftExpireProducers(later)
		}
	}
	ll.raftExpireProducers(time.Now().UnixMilli()) // nobody idle yet
	time.Sleep(100 * time.Millisecond)
	producersAre(11, 12, 13)

	// A decision taken before producer 13's next append does not expire it.
	ll.mu.Lock()
	stale := tokenOf(13, ll.prods[13])
	ll.mu.Unlock()
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 13, epoch: 0, seq: 1}, "p13b"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	res, err := c.st[lead].raft.node.Propose(ctx, group, expirePayload(later, []expireToken{stale}))
	if err != nil || res.(int) != 0 {
		t.Fatalf("stale expiry: %v %v, want 0 expired", res, err)
	}
	producersAre(11, 12, 13)

	ll.raftExpireProducers(later)
	producersAre(12) // 12's transaction is ongoing
	if r := mustAppend(t, ll, kbatch(t, batchOpt{pid: 11, epoch: 0, seq: 0}, "p11")); r.Duplicate || r.BaseOffset != 4 {
		t.Fatalf("expired producer's old batch: %+v, want appended at 4", r)
	}
	c.sameBytes(ch, 5)
	producersAre(11, 12)

	// A follower stopped without its last checkpoint resumes with the expiry's drops
	// (its segments still hold producer 13's batches).
	var f uint64
	for id := range c.st {
		if id != lead {
			f = id
		}
	}
	if err := c.st[f].RunRaftCheckpoint(); err != nil {
		t.Fatal(err)
	}
	c.st[f].raft.skipCloseCheckpoint = true
	c.stop(f)
	c.start(f)
	c.sameBytes(ch, 5)
	producersAre(11, 12)
}
