package handler

// What OffsetCommit (8) and TxnOffsetCommit (28) share: the request's partitions reduced
// to the coordinator's OffsetCommitPartition, the check of each against the topics the
// coordinator knows (UNKNOWN_TOPIC_OR_PARTITION, not sent), and the per-partition codes
// the two responses are shaped from, in request order.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// commitTopic is one topic of an OffsetCommit or TxnOffsetCommit request: its name and
// its partitions in request order, each as the coordinator takes it (leader epoch -1
// where the request version has none).
type commitTopic struct {
	name  string
	parts []*coordinatorv1.OffsetCommitPartition
}

// commitSlot addresses partition p of topic t of a request.
type commitSlot struct{ t, p int }

// commitPlan is a request's partitions and what becomes of them: codes[t][p] is the
// response's error code of partition p of topic t (0 until set); topics are the
// coordinator's topics (partitions that passed the check, topics left with none left
// out) and sent the slot of each of their partitions, in the same order.
type commitPlan struct {
	in     []commitTopic
	codes  [][]int16
	topics []*coordinatorv1.OffsetCommitTopic
	sent   []commitSlot
}

// newCommitPlan returns the plan of in, every code 0 and nothing sent.
func newCommitPlan(in []commitTopic) *commitPlan {
	pl := &commitPlan{in: in, codes: make([][]int16, len(in))}
	for i, t := range in {
		pl.codes[i] = make([]int16, len(t.parts))
	}
	return pl
}

// setAll sets the code of every partition of the request.
func (pl *commitPlan) setAll(code int16) {
	for i := range pl.codes {
		for j := range pl.codes[i] {
			pl.codes[i][j] = code
		}
	}
}

// setSent sets the code of every partition that went to the coordinator.
func (pl *commitPlan) setSent(code int16) {
	for _, s := range pl.sent {
		pl.codes[s.t][s.p] = code
	}
}

// checkCommit looks up the plan's topics (creating none). A partition of a topic the
// coordinator does not know, or outside [0, partition count), is
// UNKNOWN_TOPIC_OR_PARTITION; the others go to pl.topics and pl.sent. A failed lookup is
// returned (the getTopics error) with nothing sent. With the authorizer on, a topic
// without READ is TOPIC_AUTHORIZATION_FAILED, whether it exists or not.
func (h *Handler) checkCommit(ctx context.Context, x *access, pl *commitPlan) error {
	names := make([]string, 0, len(pl.in))
	denied := map[string]bool{}
	for _, t := range pl.in {
		if !x.topic(kafkaacl.OpRead, t.name) {
			denied[t.name] = true
			continue
		}
		names = append(names, t.name)
	}
	topics, err := h.getTopics(ctx, names, false)
	if err != nil {
		return err
	}
	for i, t := range pl.in {
		ct := &coordinatorv1.OffsetCommitTopic{Name: t.name}
		ti := topics[t.name]
		for j, p := range t.parts {
			if denied[t.name] {
				pl.codes[i][j] = kerr.TopicAuthorizationFailed.Code
				continue
			}
			if ti == nil || p.Partition < 0 || p.Partition >= ti.Partitions {
				pl.codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			ct.Partitions = append(ct.Partitions, p)
			pl.sent = append(pl.sent, commitSlot{i, j})
		}
		if len(ct.Partitions) > 0 {
			pl.topics = append(pl.topics, ct)
		}
	}
	return nil
}
