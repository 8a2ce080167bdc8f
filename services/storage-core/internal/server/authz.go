package server

import (
	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/grpcx"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// authRules is the verb every RPC of tributary.storage.v1 needs (applied only with
// --auth=required), and on which channels: read for what reads records, positions or
// settings, and for consuming a queue (Receive, Ack, ModifyAckDeadline, Seek, as a
// Pub/Sub subscriber may); append for what writes records; admin for what creates,
// deletes or reconfigures channels, queues and snapshots, or writes transaction markers.
// A queue's binding sources need read and its dead-letter log append too. Calls that
// name no channel (SweepLeases, DeleteSnapshot, ListChannels without a prefix) need the
// verb on "*". The "_" namespace is refused to everyone (grpcx.Principal.Allows).
var authRules = grpcx.Rules{
	storagev1.StorageService_CreateChannel_FullMethodName: {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.CreateChannelRequest) string { return m.GetName() })},
	storagev1.StorageService_GetChannel_FullMethodName:    {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.GetChannelRequest) string { return m.GetName() })},
	// A listing is allowed when a right covers the whole prefix asked for.
	storagev1.StorageService_ListChannels_FullMethodName:         {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.ListChannelsRequest) string { return m.GetPrefix() })},
	storagev1.StorageService_DeleteChannel_FullMethodName:        {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.DeleteChannelRequest) string { return m.GetName() })},
	storagev1.StorageService_UpdateChannelConfig_FullMethodName:  {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.UpdateChannelConfigRequest) string { return m.GetName() })},
	storagev1.StorageService_Append_FullMethodName:               {Verb: grpcx.VerbAppend, Resources: one(func(m *storagev1.AppendRequest) string { return m.GetChannel() })},
	storagev1.StorageService_Read_FullMethodName:                 {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.ReadRequest) string { return m.GetChannel() })},
	storagev1.StorageService_Subscribe_FullMethodName:            {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.SubscribeRequest) string { return m.GetChannel() })},
	storagev1.StorageService_LookupSequence_FullMethodName:       {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.LookupSequenceRequest) string { return m.GetChannel() })},
	storagev1.StorageService_OffsetForLeaderEpoch_FullMethodName: {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.OffsetForLeaderEpochRequest) string { return m.GetChannel() })},
	// Kafka's DeleteRecords is a DELETE on the topic: an admin act here.
	storagev1.StorageService_DeleteRecords_FullMethodName: {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.DeleteRecordsRequest) string { return m.GetChannel() })},
	storagev1.StorageService_AppendBatches_FullMethodName: {Verb: grpcx.VerbAppend, Resources: func(m any) []string {
		return batchChannels(m.(*storagev1.AppendBatchesRequest).GetChannels())
	}},
	// AppendStream is received into appendRequest (appendwire.go); each message is checked.
	storagev1.StorageService_AppendStream_FullMethodName: {Verb: grpcx.VerbAppend, Resources: func(m any) []string {
		switch m := m.(type) {
		case *appendRequest:
			return batchChannels(m.req.GetChannels())
		case *storagev1.AppendStreamRequest:
			return batchChannels(m.GetChannels())
		}
		return []string{grpcx.ClusterResource}
	}},
	storagev1.StorageService_Fetch_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		var out []string
		for _, c := range m.(*storagev1.FetchRequest).GetChannels() {
			out = append(out, c.GetChannel())
		}
		return out
	}},
	// Markers end transactions: the transaction coordinator's act, as Kafka's
	// WriteTxnMarkers needs ClusterAction.
	storagev1.StorageService_WriteTxnMarkers_FullMethodName: {Verb: grpcx.VerbAdmin, Resources: func(m any) []string {
		var out []string
		for _, c := range m.(*storagev1.WriteTxnMarkersRequest).GetMarkers() {
			out = append(out, c.GetChannel())
		}
		return out
	}},
	storagev1.StorageService_DescribeProducers_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		return m.(*storagev1.DescribeProducersRequest).GetChannels()
	}},

	storagev1.QueueService_CreateQueue_FullMethodName: {Verb: grpcx.VerbAdmin,
		Resources: one(func(m *storagev1.CreateQueueRequest) string { return m.GetName() }),
		Needs: func(m any) []grpcx.Need {
			r := m.(*storagev1.CreateQueueRequest)
			return queueNeeds(r.GetConfig(), r.GetBindings())
		}},
	storagev1.QueueService_GetQueue_FullMethodName: {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.GetQueueRequest) string { return m.GetName() })},
	storagev1.QueueService_UpdateQueueConfig_FullMethodName: {Verb: grpcx.VerbAdmin,
		Resources: one(func(m *storagev1.UpdateQueueConfigRequest) string { return m.GetName() }),
		Needs: func(m any) []grpcx.Need {
			return queueNeeds(m.(*storagev1.UpdateQueueConfigRequest).GetConfig(), nil)
		}},
	storagev1.QueueService_DeleteQueue_FullMethodName:       {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.DeleteQueueRequest) string { return m.GetName() })},
	storagev1.QueueService_Detach_FullMethodName:            {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.DetachRequest) string { return m.GetName() })},
	storagev1.QueueService_Unbind_FullMethodName:            {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.UnbindRequest) string { return m.GetQueue() })},
	storagev1.QueueService_Receive_FullMethodName:           {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.ReceiveRequest) string { return m.GetQueue() })},
	storagev1.QueueService_Ack_FullMethodName:               {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.AckRequest) string { return m.GetQueue() })},
	storagev1.QueueService_ModifyAckDeadline_FullMethodName: {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.ModifyAckDeadlineRequest) string { return m.GetQueue() })},
	storagev1.QueueService_GetLeases_FullMethodName:         {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.GetLeasesRequest) string { return m.GetQueue() })},
	// Expires leases of every queue: the coordinator's sweep.
	storagev1.QueueService_SweepLeases_FullMethodName: {Verb: grpcx.VerbAdmin},
	// Raft messages between storage nodes (raft mode): a peer acts for the cluster.
	storagev1.RaftTransportService_Exchange_FullMethodName: {Verb: grpcx.VerbAdmin},
	storagev1.QueueService_Seek_FullMethodName:             {Verb: grpcx.VerbRead, Resources: one(func(m *storagev1.SeekRequest) string { return m.GetQueue() })},
	storagev1.QueueService_CreateSnapshot_FullMethodName:   {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.CreateSnapshotRequest) string { return m.GetQueue() })},
	// A snapshot is named without its queue: the cluster.
	storagev1.QueueService_DeleteSnapshot_FullMethodName: {Verb: grpcx.VerbAdmin},
	storagev1.QueueService_Purge_FullMethodName:          {Verb: grpcx.VerbAdmin, Resources: one(func(m *storagev1.PurgeRequest) string { return m.GetQueue() })},

	// Share partitions (Kafka share groups) are checked on the partitions' logs: read
	// to consume and describe, admin to alter or delete the state; calls naming no
	// partition on "*".
	storagev1.ShareService_ShareFetch_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		r := m.(*storagev1.ShareFetchRequest)
		out := shareLogs(r.GetPartitions())
		for _, a := range r.GetAcknowledgements() {
			out = append(out, shareLog(a.GetTopic(), a.GetPartition()))
		}
		return out
	}},
	storagev1.ShareService_ShareAcknowledge_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		var out []string
		for _, a := range m.(*storagev1.ShareAcknowledgeRequest).GetAcknowledgements() {
			out = append(out, shareLog(a.GetTopic(), a.GetPartition()))
		}
		return out
	}},
	storagev1.ShareService_ReleaseMember_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		if ps := m.(*storagev1.ReleaseMemberRequest).GetPartitions(); len(ps) > 0 {
			return shareLogs(ps)
		}
		return []string{grpcx.ClusterResource}
	}},
	storagev1.ShareService_DescribeSharePartitions_FullMethodName: {Verb: grpcx.VerbRead, Resources: func(m any) []string {
		return shareLogs(m.(*storagev1.DescribeSharePartitionsRequest).GetPartitions())
	}},
	storagev1.ShareService_ListSharePartitions_FullMethodName: {Verb: grpcx.VerbRead},
	storagev1.ShareService_AlterSharePartitions_FullMethodName: {Verb: grpcx.VerbAdmin, Resources: func(m any) []string {
		var out []string
		for _, p := range m.(*storagev1.AlterSharePartitionsRequest).GetPartitions() {
			out = append(out, shareLog(p.GetTopic(), p.GetPartition()))
		}
		return out
	}},
	storagev1.ShareService_DeleteSharePartitions_FullMethodName: {Verb: grpcx.VerbAdmin, Resources: func(m any) []string {
		return shareLogs(m.(*storagev1.DeleteSharePartitionsRequest).GetPartitions())
	}},
}

// shareLog is the log of a share partition's Kafka partition ("*" for a name outside
// the grammar: the call then fails on it anyway).
func shareLog(topic string, partition int32) string {
	if channel.ValidateKafkaTopic(topic) != nil || partition < 0 || partition >= channel.MaxPartitions {
		return grpcx.ClusterResource
	}
	return channel.KafkaPartition(topic, partition)
}

func shareLogs(ps []*storagev1.SharePartitionRef) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = shareLog(p.GetTopic(), p.GetPartition())
	}
	return out
}

// one makes a Resources function of a request type's single channel field.
func one[M any](f func(M) string) func(any) []string {
	return func(m any) []string {
		return []string{f(m.(M))}
	}
}

func batchChannels(cbs []*storagev1.ChannelBatches) []string {
	out := make([]string, len(cbs))
	for i, c := range cbs {
		out[i] = c.GetChannel()
	}
	return out
}

// queueNeeds: reading the logs a queue is bound to, appending to its dead-letter log.
func queueNeeds(cfg *storagev1.QueueConfig, bindings []*storagev1.Binding) []grpcx.Need {
	var out []grpcx.Need
	for _, b := range bindings {
		out = append(out, grpcx.Need{Verb: grpcx.VerbRead, Resource: b.GetSource()})
	}
	if dl := cfg.GetDeadLetter().GetChannel(); dl != "" {
		out = append(out, grpcx.Need{Verb: grpcx.VerbAppend, Resource: dl})
	}
	return out
}
