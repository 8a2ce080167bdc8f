package handler

// DeleteTopics (API key 20), versions 1-6.
//
// Behaviour: topics are named (v1-5: names; v6+: name or topic id, KIP-516). Ids are
// resolved to names through the metadata cache (refreshed on a miss); an unknown id is
// UNKNOWN_TOPIC_ID. As Kafka's ControllerApis.deleteTopics: a name or id given more
// than once is answered once, INVALID_REQUEST, and not deleted; a row with both a name
// and an id, or neither, is INVALID_REQUEST. The coordinator deletes the topic, its
// channels and the groups' committed offsets of it (as Kafka's group coordinator does)
// in one call; an unknown name is UNKNOWN_TOPIC_OR_PARTITION, an invalid one
// INVALID_TOPIC_EXCEPTION.
// Deleted topics leave the cache at once. Coordinator outage: REQUEST_TIMED_OUT.
// Kafka's internal topics (channel.KafkaInternalTopics, by name or by their id) are
// never deleted: TOPIC_DELETION_DISABLED (v3+; INVALID_REQUEST before, as Kafka answers
// with delete.topic.enable=false). Kafka 4's controller deletes them like any topic
// (only kafka-topics.sh refuses, client side), losing every committed offset; ours hold
// the coordinator's state in Postgres, which a topic deletion must not drop.
// __cluster_metadata is no topic (Kafka's ControllerApis finds no id for it):
// UNKNOWN_TOPIC_OR_PARTITION.
// With the authorizer on, as Kafka 4's ControllerApis.deleteTopics: DELETE on the
// cluster allows every topic; else each needs DELETE on the topic, otherwise
// TOPIC_AUTHORIZATION_FAILED, and by id the name of a topic the principal may not
// DESCRIBE is left out.
//
// KIPs: KIP-482 (flexible v4+), KIP-516 (ids, v6).

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

func init() { register(kmsg.DeleteTopics.Int16(), 1, 6, (*Handler).handleDeleteTopics) }

func (h *Handler) handleDeleteTopics(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.DeleteTopicsRequest)
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)

	type item struct {
		name *string
		id   [16]byte
	}
	var items []item
	if req.Version >= 6 {
		for _, t := range req.Topics {
			items = append(items, item{name: t.Topic, id: t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			items = append(items, item{name: &n})
		}
	}
	// Rows Kafka's ControllerApis.deleteTopics refuses before deleting anything: a name
	// or id given more than once (answered once, not deleted), a row with both a name
	// and an id, or neither.
	names, ids := map[string]int{}, map[[16]byte]int{}
	for _, it := range items {
		switch {
		case it.name != nil && it.id == [16]byte{}:
			names[*it.name]++
		case it.name == nil && it.id != [16]byte{}:
			ids[it.id]++
		}
	}
	refused := func(name *string, id [16]byte, msg string) {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = name, id
		rt.ErrorCode, rt.ErrorMessage = kerr.InvalidRequest.Code, &msg
		resp.Topics = append(resp.Topics, rt)
	}
	dreq := &coordinatorv1.DeleteTopicsRequest{}
	idx := map[string][]int{}
	x := h.access(ctx, r)
	all := x.cluster(kafkaacl.OpDelete)
	for _, it := range items {
		switch {
		case it.name != nil && it.id != [16]byte{}:
			refused(it.name, it.id, "You may not specify both topic name and topic id.")
			continue
		case it.name == nil && it.id == [16]byte{}:
			refused(nil, it.id, "Neither topic name nor id were specified.")
			continue
		case it.name != nil && names[*it.name] > 1:
			refused(it.name, it.id, "Duplicate topic name.")
			names[*it.name] = -1 // answered; its other rows are skipped
			continue
		case it.name == nil && ids[it.id] > 1:
			refused(nil, it.id, "Duplicate topic id.")
			ids[it.id] = -1
			continue
		case it.name != nil && names[*it.name] < 0, it.name == nil && ids[it.id] < 0:
			continue
		}
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = it.name, it.id
		i := len(resp.Topics)
		resp.Topics = append(resp.Topics, rt)
		name := ""
		if it.name != nil {
			name = *it.name
		} else if ti := h.internalTopic("", it.id); ti != nil {
			name = ti.Name
			resp.Topics[i].Topic = &name
		} else {
			ti, err := h.topicByID(ctx, it.id)
			switch {
			case err != nil:
				resp.Topics[i].ErrorCode = controlCode(err)
				continue
			case ti == nil:
				resp.Topics[i].ErrorCode = kerr.UnknownTopicID.Code
				continue
			}
			name = ti.Name
			if !all && !x.topic(kafkaacl.OpDescribe, name) {
				// By id, the name of a topic the principal may not describe is not
				// disclosed.
				resp.Topics[i].ErrorCode = kerr.TopicAuthorizationFailed.Code
				continue
			}
			resp.Topics[i].Topic = &name
		}
		if !all && !x.topic(kafkaacl.OpDelete, name) {
			resp.Topics[i].ErrorCode = kerr.TopicAuthorizationFailed.Code
			continue
		}
		if !validTopicName(name) {
			resp.Topics[i].ErrorCode = kerr.InvalidTopicException.Code
			continue
		}
		if isInternalTopic(name) {
			resp.Topics[i].ErrorCode = kerr.TopicDeletionDisabled.Code
			if req.Version < 3 {
				resp.Topics[i].ErrorCode = kerr.InvalidRequest.Code
			}
			resp.Topics[i].ErrorMessage = strPtr("Internal topic " + name + " cannot be deleted: its records are the coordinator's state.")
			continue
		}
		if _, dup := idx[name]; !dup {
			dreq.Names = append(dreq.Names, name)
		}
		idx[name] = append(idx[name], i)
	}
	if len(dreq.Names) == 0 {
		return resp, nil
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.coord.DeleteTopics(cctx, dreq)
	for _, n := range dreq.Names {
		h.topics.invalidate(n)
	}
	if err != nil {
		code := controlCode(err)
		h.log.Warn("coordinator DeleteTopics failed", zap.Strings("topics", dreq.Names), zap.Error(err))
		for _, is := range idx {
			for _, i := range is {
				resp.Topics[i].ErrorCode = code
				resp.Topics[i].ErrorMessage = errMessage(err)
			}
		}
		return resp, nil
	}
	for _, res := range out.GetResults() {
		for _, i := range idx[res.GetName()] {
			rt := &resp.Topics[i]
			rt.ErrorCode = int16(res.GetErrorCode())
			rt.ErrorMessage = strPtr(res.GetErrorMessage())
			if t := res.GetTopic(); t != nil && rt.TopicID == ([16]byte{}) {
				copy(rt.TopicID[:], t.GetTopicId())
			}
		}
	}
	return resp, nil
}
