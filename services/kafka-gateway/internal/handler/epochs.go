package handler

// Kafka leader epochs (KIP-320: Metadata v7+ leader_epoch, Fetch v9+ / ListOffsets v4+ /
// OffsetForLeaderEpoch current_leader_epoch).
//
// With one storage node every partition has leader epoch 0 forever (leaderEpochCode).
// With several (raft mode, a Router) a partition's leader epoch is the term of its
// channel's Raft group, which storage-core also writes into every batch's
// partitionLeaderEpoch: a new leader is elected in a larger term, so a client seeing a
// new leader sees a larger epoch. The Router keeps the term each channel had when it
// last asked (GetChannel: Metadata asks for every partition it lists, and a read of a
// channel without a cached leader asks once); a current_leader_epoch is checked
// against it as Kafka's Partition.checkCurrentLeaderEpoch does: -1 is not checked, one
// that differs from the cached term is asked again of storage-core (another gateway
// may have handed out a newer term, or a re-created channel an older one), and then a
// smaller one is FENCED_LEADER_EPOCH (the client's metadata is stale), a larger one
// UNKNOWN_LEADER_EPOCH (the client knows an epoch storage-core has not reached here).
// A term storage-core cannot name (no answer) is not checked.

import (
	"context"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// kafkaEpoch is Raft term as a Kafka leader epoch (int32; terms past it are capped).
func kafkaEpoch(term uint64) int32 {
	if term > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(term)
}

// learnChannel remembers what GetChannel said of ch: its leader (when named) and term.
func (r *Router) learnChannel(ch string, c *storagev1.Channel) {
	if l := c.GetLeaderAddress(); l != "" {
		_ = r.lc.Learn(ch, l)
	}
	if t := c.GetLeaderTerm(); t > 0 {
		r.emu.Lock()
		r.epochs[ch] = kafkaEpoch(t)
		r.emu.Unlock()
	}
}

// forgetTopic drops what was learned of topic's partition channels (every topic's
// when topic is ""): their epochs and cached leaders, so a deleted topic leaves
// nothing behind and a re-created one is asked afresh.
func (r *Router) forgetTopic(topic string) {
	of := func(ch string) bool {
		t, _, ok := channel.ParseKafka(ch)
		return ok && (topic == "" || t == topic)
	}
	r.emu.Lock()
	for ch := range r.epochs {
		if of(ch) {
			delete(r.epochs, ch)
		}
	}
	r.emu.Unlock()
	// Leaders are also learned without an epoch (a produce's NOT_LEADER answers, a
	// followed redirect): those go too.
	r.lc.ForgetIf(of)
}

// epoch is ch's leader epoch as last learned (false: none yet).
func (r *Router) epoch(ch string) (int32, bool) {
	r.emu.RLock()
	e, ok := r.epochs[ch]
	r.emu.RUnlock()
	return e, ok
}

// refreshEpoch asks storage-core for ch's term (GetChannel on its leader as cached)
// and returns it (false: no answer, or no term yet).
func (r *Router) refreshEpoch(ctx context.Context, ch string) (int32, bool) {
	cctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	out, err := r.StorageServiceClient.GetChannel(cctx, &storagev1.GetChannelRequest{Name: ch})
	if err != nil {
		return 0, false
	}
	r.learnChannel(ch, out.GetChannel())
	if t := out.GetChannel().GetLeaderTerm(); t > 0 {
		return kafkaEpoch(t), true
	}
	return 0, false
}

// leaderEpochs returns the leader epoch of each of chs, asked of storage-core now
// (-1 where it did not answer).
func (r *Router) leaderEpochs(ctx context.Context, chs []string) []int32 {
	out := make([]int32, len(chs))
	forEach(len(chs), func(i int) {
		out[i] = -1
		if e, ok := r.refreshEpoch(ctx, chs[i]); ok {
			out[i] = e
		}
	})
	return out
}

// epochCode checks current_leader_epoch current of ch against its term (see above):
// 0, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.
func (r *Router) epochCode(ctx context.Context, ch string, current int32) int16 {
	if current == -1 {
		return 0
	}
	e, ok := r.epoch(ch)
	if !ok || current != e {
		if e, ok = r.refreshEpoch(ctx, ch); !ok {
			return 0
		}
	}
	switch {
	case current < e:
		return kerr.FencedLeaderEpoch.Code
	case current > e:
		return kerr.UnknownLeaderEpoch.Code
	}
	return 0
}

// leaderEpoch is ch's leader epoch for an answer: 0 with one storage node; with a
// Router its term as last learned, -1 when none was.
func (h *Handler) leaderEpoch(ch string) int32 {
	if h.router == nil {
		return 0
	}
	if e, ok := h.router.epoch(ch); ok {
		return e
	}
	return -1
}

// offsetForLeaderEpoch answers rp (OffsetForLeaderEpoch of channel ch) from the
// channel's leader: its answer for requested, current checked against the term it
// answered in (which the Router then keeps for ch).
func (r *Router) offsetForLeaderEpoch(ctx context.Context, rp *kmsg.OffsetForLeaderEpochResponseTopicPartition, ch string, requested, current int32) {
	out, err := r.StorageServiceClient.OffsetForLeaderEpoch(ctx, &storagev1.OffsetForLeaderEpochRequest{Channel: ch, LeaderEpoch: requested})
	if err != nil {
		rp.ErrorCode = dataCode(err)
		return
	}
	term := out.GetCurrentLeaderEpoch()
	if term > 0 {
		r.emu.Lock()
		r.epochs[ch] = term
		r.emu.Unlock()
	}
	switch {
	case current == -1:
	case current < term:
		rp.ErrorCode = kerr.FencedLeaderEpoch.Code
		return
	case current > term:
		rp.ErrorCode = kerr.UnknownLeaderEpoch.Code
		return
	}
	rp.LeaderEpoch, rp.EndOffset = out.GetLeaderEpoch(), out.GetEndSequence()
}
