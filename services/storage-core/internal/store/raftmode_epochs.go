package store

import (
	"context"
	"fmt"

	"github.com/tributary/tributary/services/storage-core/internal/raftnode"
	"go.uber.org/zap"
)

// Raft mode's leader epochs (KIP-101/KIP-279/KIP-320): the index is built at apply
// (epochs.go); cmdRaftEpoch entries open a leader's term in it.

const (
	// cmdRaftEpoch: the leader opens its term in the epoch index at the log end
	// (Kafka's leader assigns its epoch at the log end offset when it becomes leader),
	// so that once it is applied every entry of earlier terms is applied too.
	cmdRaftEpoch = 6
	raftEpochLen = 2
)

// EpochEnd is OffsetForLeaderEpoch's answer.
type EpochEnd struct {
	// Epoch is the largest leader epoch at or below the one asked (-1: UNDEFINED).
	Epoch int32
	// EndOffset is the offset after Epoch's last record: the start offset of the next
	// epoch, or the high watermark for the current one (-1: UNDEFINED).
	EndOffset int64
	// Current is the channel's current leader epoch (the Raft term; 0 in the default
	// mode).
	Current int32
}

// OffsetForLeaderEpoch answers Kafka's OffsetForLeaderEpoch (API 23) for requested as
// the partition leader does (LeaderEpochFileCache.endOffsetFor, see epochIndex). In
// raft mode this node must lead the channel's group; when its index does not hold its
// own term yet it first commits and applies a cmdRaftEpoch entry, so that the entries
// of earlier terms are applied here (a new leader may not have applied them yet, and
// answering from behind would make a consumer see a truncation). In the default mode
// the epoch is 0 forever: requested >= 0 answers (0, high watermark), since stored
// batches keep the partitionLeaderEpoch their producer sent (not stamped, as nothing
// fences there), and a consumer asking with it must not see a truncation; requested
// < 0 answers (-1, -1). Errors (raft mode): ErrNotLeader (naming the leader),
// ErrNotReplicated (the term's entry not applied within the propose timeout),
// ErrClosed, ErrNotFound.
func (l *Log) OffsetForLeaderEpoch(requested int32) (EpochEnd, error) {
	r := l.st.raft
	if r == nil || l.epochs == nil {
		if requested < 0 {
			return EpochEnd{Epoch: -1, EndOffset: -1}, nil
		}
		return EpochEnd{Epoch: 0, EndOffset: l.HighWatermark()}, nil
	}
	for try := 0; ; try++ {
		leader, addr, term, err := r.node.Leader(l.wal.group)
		if err != nil {
			return EpochEnd{}, raftErr(err, "channel "+l.name)
		}
		if leader != r.opts.NodeID {
			return EpochEnd{}, raftErr(&raftnode.NotLeaderError{Group: l.wal.group, Leader: leader, Addr: addr}, "channel "+l.name)
		}
		cur := kafkaEpoch(term)
		if latest, ok := l.epochs.latest(); ok && latest >= cur {
			// cur's entry is applied (latest > cur: the term moved on meanwhile; the
			// answer is for latest).
			cur = latest
			ep, end := l.epochs.endOffsetFor(requested, l.HighWatermark())
			return EpochEnd{Epoch: ep, EndOffset: end, Current: cur}, nil
		}
		if try > 0 {
			return EpochEnd{}, fmt.Errorf("%w: term %d of channel %s not applied here yet", ErrNotReplicated, term, l.name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProposeTimeout)
		_, err = r.node.Propose(ctx, l.wal.group, []byte{cmdRaftEpoch, 0})
		cancel()
		if err != nil {
			return EpochEnd{}, raftErr(err, "channel "+l.name)
		}
	}
}

// assignEpoch records, at apply, that term's entries write from the log end on
// (raft mode; nothing without an index).
func (l *Log) assignEpoch(term uint64) error {
	if l.epochs == nil {
		return nil
	}
	ep := kafkaEpoch(term)
	if latest, ok := l.epochs.latest(); ok && latest == ep {
		return nil
	}
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	if err := l.epochs.assign(ep, next); err != nil {
		l.log.Error("leader-epoch index", zap.Int32("epoch", ep), zap.Int64("start_offset", next), zap.Error(err))
		return err
	}
	return nil
}

// applyRaftOther applies the entries of epochs and expiry (ok false: payload is
// neither).
func (l *Log) applyRaftOther(term uint64, payload []byte) (res any, ok bool, err error) {
	switch {
	case len(payload) == raftEpochLen && payload[0] == cmdRaftEpoch:
		return nil, true, l.assignEpoch(term)
	case len(payload) >= raftExpireHdrLen && payload[0] == cmdRaftExpire:
		n, err := l.applyExpire(payload)
		return n, true, err
	}
	return nil, false, nil
}
