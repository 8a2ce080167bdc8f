package handler

// Kafka Metadata's brokers, leaders, replicas and ISR through a Router (several
// storage nodes, raft mode; ARCHITECTURE "Routing"). The gateways stay the brokers
// clients bootstrap from and coordinate through; each storage node the Router has
// learned of is listed too, as broker storageBrokerBase + its node id, reached at a
// gateway's address (node id modulo the gateways, so leaders spread over them as the
// storage leaders do; any gateway serves any partition). A partition's leader is its
// Raft group's leader, its replicas the group's voters and its ISR the voters the
// leader counts in sync (storage-core GetChannel on the leader: alive, replicating,
// within raftnode.MaxInSyncLag entries). A partition whose leader no node named (an
// election, no storage node answering) keeps the one-node answer: a gateway as
// leader, replicas = ISR = [it], since any gateway still serves it.

import (
	"context"
	"math"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// storageBrokerBase is the first Kafka broker id of the range storage nodes are
// mapped into (node id n is broker storageBrokerBase + n). A gateway's own --node-id
// must stay below it (a derived one falls in it with odds of about one in 2^31 per
// storage node).
const storageBrokerBase = 1 << 30

// storageBroker is storage node id as a Kafka broker id (-1 for none or out of range).
func storageBroker(id uint64) int32 {
	if id == 0 || id > math.MaxInt32-storageBrokerBase {
		return -1
	}
	return int32(storageBrokerBase + id)
}

// learnNodes records the storage node ids c names. Caller holds emu.
func (r *Router) learnNodes(c *storagev1.Channel) {
	if id := c.GetLeaderId(); id != 0 {
		r.nodes[id] = true
	}
	for _, id := range c.GetReplicaIds() {
		r.nodes[id] = true
	}
}

// storageBrokers lists every storage node learned of as a broker at a gateway's
// address (gateways sorted by node id, as liveBrokers returns them), by broker id.
func (r *Router) storageBrokers(gateways []Broker) []Broker {
	r.emu.RLock()
	ids := make([]uint64, 0, len(r.nodes))
	for id := range r.nodes {
		ids = append(ids, id)
	}
	r.emu.RUnlock()
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []Broker
	for _, id := range ids {
		b := storageBroker(id)
		if b < 0 || len(gateways) == 0 {
			continue
		}
		g := gateways[id%uint64(len(gateways))]
		out = append(out, Broker{NodeID: b, Host: g.Host, Port: g.Port, Rack: g.Rack})
	}
	return out
}

// partitionState is what Metadata reports of one partition through a Router.
type partitionState struct {
	epoch         int32 // -1: no node answered
	leader        int32 // storage broker id; -1: none named
	replicas, isr []int32
}

// partitionStates asks storage-core (GetChannel, on each channel's leader as cached)
// for each of chs now.
func (r *Router) partitionStates(ctx context.Context, chs []string) []partitionState {
	out := make([]partitionState, len(chs))
	forEach(len(chs), func(i int) {
		out[i] = partitionState{epoch: -1, leader: -1}
		cctx, cancel := context.WithTimeout(ctx, resolveTimeout)
		defer cancel()
		resp, err := r.StorageServiceClient.GetChannel(cctx, &storagev1.GetChannelRequest{Name: chs[i]})
		if err != nil {
			return
		}
		c := resp.GetChannel()
		r.learnChannel(chs[i], c)
		if t := c.GetLeaderTerm(); t > 0 {
			out[i].epoch = kafkaEpoch(t)
		}
		if out[i].leader = storageBroker(c.GetLeaderId()); out[i].leader < 0 {
			return
		}
		out[i].replicas, out[i].isr = brokerIDs(c.GetReplicaIds()), brokerIDs(c.GetIsrIds())
		if len(out[i].replicas) == 0 {
			// Answered by a node that does not lead the channel: only the leader is known.
			out[i].replicas = []int32{out[i].leader}
		}
		if len(out[i].isr) == 0 {
			out[i].isr = []int32{out[i].leader}
		}
	})
	return out
}

// brokerIDs maps storage node ids to broker ids.
func brokerIDs(ids []uint64) []int32 {
	out := make([]int32, 0, len(ids))
	for _, id := range ids {
		if b := storageBroker(id); b >= 0 {
			out = append(out, b)
		}
	}
	return out
}

// metadataBrokers adds the storage brokers to gateways (raft mode; gateways alone
// otherwise), sorted by broker id.
func (h *Handler) metadataBrokers(gateways []Broker) []kmsg.MetadataResponseBroker {
	all := gateways
	if h.router != nil {
		all = append(append([]Broker(nil), gateways...), h.router.storageBrokers(gateways)...)
	}
	out := make([]kmsg.MetadataResponseBroker, 0, len(all))
	for _, b := range all {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port, mb.Rack = b.NodeID, b.Host, b.Port, b.Rack
		out = append(out, mb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].NodeID < out[j].NodeID })
	return out
}
