package store

import (
	"context"
	"fmt"

	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
)

// RaftReplicas is channel name's replica set as this node, its leader, sees it: the
// group's voters and those in sync (raftnode.Replicas: alive, replicating, within
// raftnode.MaxInSyncLag entries), node ids ascending, for Kafka Metadata's replicas and
// ISR. ctx bounds the wait for the node's loop. Errors: ErrNotLeader (naming the
// leader), ErrNotFound, ErrNotReplicated (ctx ended first), ErrClosed,
// ErrInvalidArgument (raft mode off).
func (s *Store) RaftReplicas(ctx context.Context, name string) (raftnode.Replicas, error) {
	if s.raft == nil {
		return raftnode.Replicas{}, fmt.Errorf("%w: raft mode is off", ErrInvalidArgument)
	}
	l, err := s.Get(name)
	if err != nil {
		return raftnode.Replicas{}, err
	}
	if leader, addr, _, err := s.raft.node.Leader(l.wal.group); err == nil && leader != s.raft.opts.NodeID {
		// Not the leader by its last view: no trip through the loop.
		return raftnode.Replicas{}, raftErr(&raftnode.NotLeaderError{Group: l.wal.group, Leader: leader, Addr: addr}, "channel "+name)
	}
	r, err := s.raft.node.Replicas(ctx, l.wal.group)
	return r, raftErr(err, "channel "+name)
}
