package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"go.uber.org/zap"
)

// Raft mode's producer-state expiry (Kafka producer.id.expiration.ms): the channel's
// leader decides, by its clock, and proposes the decision as an entry of the group.

const (
	// cmdRaftExpire: producer-state expiry (flags, leader clock, count, then per
	// producer: id, epoch, coordinator epoch, last batch's last sequence and base
	// offset as the leader held them; -1, -1 when it kept no batch).
	cmdRaftExpire     = 5
	raftExpireHdrLen  = 1 + 1 + 8 + 4
	raftExpireItemLen = 8 + 2 + 4 + 4 + 8
	// maxExpirePerEntry bounds one expiry entry (~260 KB); the rest waits for the next
	// retention run.
	maxExpirePerEntry = 10000
)

// expireToken is a producer's state as the leader saw it when it chose to expire it.
type expireToken struct {
	pid        int64
	epoch      int16
	coordEpoch int32
	lastSeq    int32
	lastBase   int64
}

func tokenOf(pid int64, st *producerState) expireToken {
	t := expireToken{pid: pid, epoch: st.epoch, coordEpoch: st.coordEpoch, lastSeq: -1, lastBase: -1}
	if st.n > 0 {
		b := st.batches[st.n-1]
		t.lastSeq, t.lastBase = b.lastSeq, b.baseOffset
	}
	return t
}

// raftExpireProducers, on the channel's leader, proposes the expiry of the producers
// idle for producer.id.expiration.ms (producerExpiryMs) by this node's clock, none
// with an ongoing transaction (Kafka never expires those). Each replica applies the
// leader's decision, not its own clock: its producer times differ (a restart counts
// recovered producers active from then), its producer states do not. Followers do
// nothing; a failed proposal is logged and the next run decides again.
func (l *Log) raftExpireProducers(nowMs int64) {
	r := l.st.raft
	if leader, _, _, err := r.node.Leader(l.wal.group); err != nil || leader != r.opts.NodeID {
		return
	}
	var idle []expireToken
	l.mu.Lock()
	for pid, st := range l.prods {
		if st.lastMs < nowMs-producerExpiryMs {
			if _, open := l.openTxn(pid); !open {
				idle = append(idle, tokenOf(pid, st))
			}
		}
	}
	l.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].pid < idle[j].pid })
	idle = idle[:min(len(idle), maxExpirePerEntry)]
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProposeTimeout)
	defer cancel()
	if _, err := r.node.Propose(ctx, l.wal.group, expirePayload(nowMs, idle)); err != nil {
		l.log.Warn("producer expiry not replicated", zap.Int("producers", len(idle)), zap.Error(raftErr(err, "channel "+l.name)))
	}
}

// expirePayload is the cmdRaftExpire entry of the leader's clock nowMs (ms) for idle.
func expirePayload(nowMs int64, idle []expireToken) []byte {
	p := make([]byte, raftExpireHdrLen, raftExpireHdrLen+len(idle)*raftExpireItemLen)
	p[0] = cmdRaftExpire
	binary.BigEndian.PutUint64(p[2:], uint64(nowMs))
	binary.BigEndian.PutUint32(p[10:], uint32(len(idle)))
	for _, t := range idle {
		p = binary.BigEndian.AppendUint64(p, uint64(t.pid))
		p = binary.BigEndian.AppendUint16(p, uint16(t.epoch))
		p = binary.BigEndian.AppendUint32(p, uint32(t.coordEpoch))
		p = binary.BigEndian.AppendUint32(p, uint32(t.lastSeq))
		p = binary.BigEndian.AppendUint64(p, uint64(t.lastBase))
	}
	return p
}

// applyExpire drops the producers an expiry entry names, each only if its state is
// still the one the leader saw (no append or marker of it applied since) and it has
// no ongoing transaction: the same producers on every replica. It returns how many
// were dropped.
func (l *Log) applyExpire(p []byte) (int, error) {
	n := int(binary.BigEndian.Uint32(p[10:]))
	if n < 0 || len(p) != raftExpireHdrLen+n*raftExpireItemLen {
		return 0, fmt.Errorf("%w: producer expiry entry of %d bytes for %d producers", ErrInternal, len(p), n)
	}
	dropped := 0
	l.mu.Lock()
	defer l.mu.Unlock()
	for q := p[raftExpireHdrLen:]; len(q) > 0; q = q[raftExpireItemLen:] {
		t := expireToken{
			pid:        int64(binary.BigEndian.Uint64(q)),
			epoch:      int16(binary.BigEndian.Uint16(q[8:])),
			coordEpoch: int32(binary.BigEndian.Uint32(q[10:])),
			lastSeq:    int32(binary.BigEndian.Uint32(q[14:])),
			lastBase:   int64(binary.BigEndian.Uint64(q[18:])),
		}
		st := l.prods[t.pid]
		if st == nil || tokenOf(t.pid, st) != t {
			continue
		}
		if _, open := l.openTxn(t.pid); open {
			continue
		}
		delete(l.prods, t.pid)
		dropped++
	}
	return dropped, nil
}
