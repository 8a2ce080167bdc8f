package raftnode

import (
	"context"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// MaxInSyncLag is how many entries a follower's match index may trail the leader's
// last index and still count as in sync (Kafka's ISR, here by entries instead of
// replica.lag.time.max.ms: a follower raft streams to keeps within a few in-flight
// appends).
const MaxInSyncLag = 1000

// Replicas is a group's membership as its leader sees it (Kafka Metadata's replicas
// and ISR).
type Replicas struct {
	// Voters are the group's voting members, ascending.
	Voters []uint64
	// InSync are the leader and every follower that is alive by node liveness, in
	// raft's replicate state (not probing or waiting for a snapshot) and whose match
	// index is within MaxInSyncLag entries of the leader's last index; ascending.
	InSync []uint64
}

// Replicas answers group id's membership from its leader's progress tracker, read on
// the loop goroutine. Errors: ErrNoGroup, *NotLeaderError (this node does not lead the
// group), ErrClosed, ErrTimeout (ctx ended first).
func (n *Node) Replicas(ctx context.Context, id uint64) (Replicas, error) {
	g := n.group(id)
	if g == nil {
		return Replicas{}, ErrNoGroup
	}
	type answer struct {
		r   Replicas
		err error
	}
	ch := make(chan answer, 1)
	n.post(item{kind: itemFunc, g: g, fn: func() {
		r, err := n.replicas(g)
		ch <- answer{r, err}
	}})
	select {
	case a := <-ch:
		return a.r, a.err
	case <-ctx.Done():
		return Replicas{}, fmt.Errorf("%w: %v", ErrTimeout, ctx.Err())
	case <-n.closed:
		return Replicas{}, ErrClosed
	}
}

// replicas is Replicas on the loop goroutine.
func (n *Node) replicas(g *group) (Replicas, error) {
	if g.removed {
		return Replicas{}, ErrNoGroup
	}
	st := g.rn.Status()
	if st.RaftState != raft.StateLeader {
		return Replicas{}, &NotLeaderError{Group: g.id, Leader: st.Lead, Addr: n.cfg.Peers[st.Lead]}
	}
	last := st.Progress[n.cfg.ID].Match
	var r Replicas
	for id, pr := range st.Progress {
		if pr.IsLearner {
			continue
		}
		r.Voters = append(r.Voters, id)
		if id == n.cfg.ID || (n.alive[id] && pr.State == tracker.StateReplicate && pr.Match+MaxInSyncLag >= last) {
			r.InSync = append(r.InSync, id)
		}
	}
	slices.Sort(r.Voters)
	slices.Sort(r.InSync)
	return r, nil
}
