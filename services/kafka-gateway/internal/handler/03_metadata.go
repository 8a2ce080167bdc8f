package handler

// Metadata (API key 3), versions 0-13 (v13, KIP-1102: top-level error code, always 0).
//
// Behaviour:
//   - Brokers are the live kafka-gateway replicas (NATS announcements, self always
//     included), sorted by node id; the controller is the lowest node id; the cluster id
//     is derived from --cluster-id (stable across replicas and restarts).
//   - Partition leaders are spread deterministically over the sorted live brokers:
//     leader = brokers[(fnv32a(topic) + partition) % n]; replicas = isr = [leader],
//     leader epoch 0 (with several storage nodes: the partition's Raft term, epochs.go). Any replica serves any partition, so leader placement only spreads
//     load and never causes NOT_LEADER_OR_FOLLOWER.
//   - Topic ids (v10+) are the coordinator's UUIDs; topics may be asked by id (v10+),
//     an unknown id is UNKNOWN_TOPIC_ID. A topic asked several times (by name, or by
//     id) is answered once, in the order first asked, as Kafka answers the set of the
//     requested topics.
//   - Unknown topics are created (default partition count) when auto-create is enabled
//     and the client allows it (always for v0-3, allow_auto_topic_creation for v4+);
//     else UNKNOWN_TOPIC_OR_PARTITION. Invalid names are INVALID_TOPIC_EXCEPTION. When
//     the coordinator cannot be reached, uncached topics are LEADER_NOT_AVAILABLE
//     (retriable).
//   - Kafka's internal topics __consumer_offsets, __share_group_state and
//     __transaction_state (Kafka 4's Topic.isInternal; 50 partitions each) are listed
//     as Kafka lists them, is_internal set, with an id stable per cluster
//     (channel.KafkaInternalTopicID); they are never created, hold no records here
//     (offsets, share-group state and transactions live in the coordinator and
//     storage-core): Fetch and ListOffsets read them as empty logs, and a Produce or
//     DeleteRecords is INVALID_TOPIC_EXCEPTION, as Kafka refuses those on internal
//     topics.
//   - With the authorizer on (authorizer.go), as Kafka's handleTopicMetadataRequest:
//     the all-topics form lists only the topics the principal may DESCRIBE; a named
//     topic it may not describe is TOPIC_AUTHORIZATION_FAILED (by id: with the id and
//     no name), existing or not; auto-creation needs CREATE on the cluster or the
//     topic, else TOPIC_AUTHORIZATION_FAILED. Authorized operations (KIP-430: topics
//     v8+, cluster v8-10) are filled when asked; with the authorizer off they stay
//     "not provided".
//
// KIPs: KIP-204 (allow auto create, v4), KIP-430 (v8), KIP-482 (flexible v9+),
// KIP-516 (topic ids, v10+).

import (
	"context"
	"hash/fnv"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
)

func init() { register(kmsg.Metadata.Int16(), 0, 13, (*Handler).handleMetadata) }

// leaderFor returns the node id leading partition p of topic among sorted brokers.
func leaderFor(topic string, p int32, brokers []Broker) int32 {
	if len(brokers) == 0 {
		return -1
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(topic))
	idx := (uint64(f.Sum32()) + uint64(p)) % uint64(len(brokers))
	return brokers[idx].NodeID
}

func (h *Handler) handleMetadata(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.MetadataRequest)
	resp := req.ResponseKind().(*kmsg.MetadataResponse)

	brokers := h.liveBrokers(r.Listener)
	for _, b := range brokers {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port, mb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		resp.Brokers = append(resp.Brokers, mb)
	}
	cid := h.kafkaID
	resp.ClusterID = &cid
	resp.ControllerID = brokers[0].NodeID

	x := h.access(ctx, r)
	if req.IncludeClusterAuthorizedOperations && x != nil {
		resp.AuthorizedOperations = x.clusterOperations()
	}
	describe := func(mt kmsg.MetadataResponseTopic) kmsg.MetadataResponseTopic {
		if req.IncludeTopicAuthorizedOperations && x != nil && mt.Topic != nil {
			mt.AuthorizedOperations = x.operations(kafkaacl.ResourceTopic, *mt.Topic)
		}
		return mt
	}
	all := req.Topics == nil || (req.Version == 0 && len(req.Topics) == 0)
	if all {
		topics, err := h.allTopics(ctx)
		if err != nil {
			h.log.Warn("metadata for all topics without coordinator", zap.Error(err))
		}
		for _, it := range channel.KafkaInternalTopics {
			topics = append(topics, h.internalTopic(it.Name, [16]byte{}))
		}
		sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
		for _, ti := range topics {
			if x.topic(kafkaacl.OpDescribe, ti.Name) {
				resp.Topics = append(resp.Topics, describe(h.metadataTopic(ctx, req.Version, ti, brokers)))
			}
		}
		return resp, nil
	}

	allowCreate := req.Version < 4 || req.AllowAutoTopicCreation
	// Each topic is answered once, however often it is asked (Kafka answers the set of
	// the requested names or ids): a repeated name would otherwise cost its whole
	// partition list per repetition.
	asked := make([]kmsg.MetadataRequestTopic, 0, len(req.Topics))
	seenNames, seenIDs := map[string]bool{}, map[[16]byte]bool{}
	for _, t := range req.Topics {
		if t.Topic != nil {
			if seenNames[*t.Topic] {
				continue
			}
			seenNames[*t.Topic] = true
		} else {
			if seenIDs[t.TopicID] {
				continue
			}
			seenIDs[t.TopicID] = true
		}
		asked = append(asked, t)
	}
	var names []string
	for _, t := range asked {
		if t.Topic != nil && validTopicName(*t.Topic) && x.topic(kafkaacl.OpDescribe, *t.Topic) && h.internalTopic(*t.Topic, [16]byte{}) == nil {
			names = append(names, *t.Topic)
		}
	}
	infos, codes, _ := h.resolveTopics(ctx, names, allowCreate, x.createCheck())
	for _, t := range asked {
		var mt kmsg.MetadataResponseTopic
		switch {
		case t.Topic == nil:
			ti, err := h.topicByID(ctx, t.TopicID)
			if it := h.internalTopic("", t.TopicID); it != nil {
				ti, err = it, nil
			}
			switch {
			case err != nil:
				mt = kmsg.NewMetadataResponseTopic()
				mt.TopicID = t.TopicID
				mt.ErrorCode = kerr.LeaderNotAvailable.Code
			case ti == nil:
				mt = kmsg.NewMetadataResponseTopic()
				mt.TopicID = t.TopicID
				mt.ErrorCode = kerr.UnknownTopicID.Code
			case !x.topic(kafkaacl.OpDescribe, ti.Name):
				// Topic ids are not secret (Kafka answers so too); the name is.
				mt = kmsg.NewMetadataResponseTopic()
				mt.TopicID = t.TopicID
				mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
			default:
				mt = describe(h.metadataTopic(ctx, req.Version, ti, brokers))
			}
		case !x.topic(kafkaacl.OpDescribe, *t.Topic):
			mt = kmsg.NewMetadataResponseTopic()
			mt.Topic = t.Topic
			mt.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case !validTopicName(*t.Topic):
			mt = kmsg.NewMetadataResponseTopic()
			mt.Topic = t.Topic
			mt.ErrorCode = kerr.InvalidTopicException.Code
		case h.internalTopic(*t.Topic, [16]byte{}) != nil:
			mt = describe(h.metadataTopic(ctx, req.Version, h.internalTopic(*t.Topic, [16]byte{}), brokers))
		case infos[*t.Topic] != nil:
			mt = describe(h.metadataTopic(ctx, req.Version, infos[*t.Topic], brokers))
		default:
			mt = kmsg.NewMetadataResponseTopic()
			mt.Topic = t.Topic
			mt.ErrorCode = codes[*t.Topic]
			if mt.ErrorCode == 0 {
				mt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp, nil
}

// metadataTopic describes one topic with its partitions led by brokers. Leader epochs
// (v7+) are 0 with one storage node; with a Router each partition's Raft term, asked
// of storage-core now (one GetChannel per partition; -1 where none answered).
func (h *Handler) metadataTopic(ctx context.Context, version int16, ti *topicInfo, brokers []Broker) kmsg.MetadataResponseTopic {
	mt := kmsg.NewMetadataResponseTopic()
	name := ti.Name
	mt.Topic = &name
	mt.TopicID = ti.ID
	mt.IsInternal = ti.Internal
	var epochs []int32
	if h.router != nil && version >= 7 && !ti.Internal {
		chs := make([]string, ti.Partitions)
		for p := range chs {
			chs[p] = channel.KafkaPartition(ti.Name, int32(p))
		}
		epochs = h.router.leaderEpochs(ctx, chs)
	}
	for p := int32(0); p < ti.Partitions; p++ {
		mp := kmsg.NewMetadataResponseTopicPartition()
		mp.Partition = p
		mp.Leader = leaderFor(ti.Name, p, brokers)
		mp.LeaderEpoch = 0
		if epochs != nil {
			mp.LeaderEpoch = epochs[p]
		}
		mp.Replicas = []int32{mp.Leader}
		mp.ISR = []int32{mp.Leader}
		mp.OfflineReplicas = []int32{}
		mt.Partitions = append(mt.Partitions, mp)
	}
	return mt
}
