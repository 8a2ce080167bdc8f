package handler

// Produce (API key 0), versions 0-12 advertised, 3-12 served.
//
// Versions 0-2 carry magic 0/1 message sets, which storage-core does not store: they are
// advertised anyway (librdkafka picks its compression codecs from Produce's advertised
// range, so a minimum of 3 would make kcat silently stop compressing) and every partition
// is answered with UNSUPPORTED_VERSION (35). v13 (topic ids, KIP-516) is not served.
//
// Behaviour:
//   - acks must be 0, 1 or -1 (else INVALID_REQUIRED_ACKS for every partition); acks=0
//     gets no response at all, and a failed partition closes the connection (as Kafka
//     does) so the client refreshes its metadata. Every ack level waits for
//     storage-core's fsync. A produce read in full is stored even when its connection
//     ends before it is answered, as Kafka's broker does (server.serveConn runs it on a
//     context the connection's end does not cancel).
//   - Topic names are validated (INVALID_TOPIC_EXCEPTION); unknown topics are created
//     with the default partition count when auto-create is on (else
//     UNKNOWN_TOPIC_OR_PARTITION); a partition beyond the topic's count is
//     UNKNOWN_TOPIC_OR_PARTITION.
//   - A partition listed more than once (in one topic or in two entries of the same
//     topic) is appended once, with the records of its last entry, and answered once;
//     the response has one entry per distinct topic and partition, in order of first
//     appearance (Kafka keys both the records and the answers by topic-partition).
//   - storage-core is the one validator of the records (ChannelBatches.single_batch:
//     exactly one batch per partition, Kafka's ProduceRequest.validateRecords): null
//     or empty records, magic 0 or 1, a control batch or more than one batch are
//     INVALID_RECORD, a short or overlong frame, a magic of no Kafka format (not 0..2)
//     or a bad CRC-32C CORRUPT_MESSAGE (storage.proto ErrorCode, errors.go). A record
//     without a key on a compacted topic is INVALID_RECORD with its index in
//     record_errors (v8+, Kafka's LogValidator). The
//     gateway only reads a transactional batch's header (batch.go: why before the CRC
//     is checked); a transactional
//     partition its coordinator refuses is validated by storage-core (validate_only),
//     whose refusal (a corrupt batch) is the answer. All partitions go to storage-core
//     in ONE request (AppendStream, see below). BaseOffset =
//     first_sequence - 1 (the original offset for an idempotent duplicate),
//     LogAppendTime from storage (-1 for CreateTime topics), LogStartOffset =
//     log_start_sequence - 1.
//   - Transactional batches (KIP-98) are stored only once the coordinator confirms that
//     the partition is in the Ongoing transaction of that producer id and epoch under
//     the request's transactional id (one verify-only AddPartitionsToTxn per request,
//     as Kafka's brokers do since KIP-890 part 1): a partition not added, no open
//     transaction, another producer id or no transactional id is INVALID_TXN_STATE
//     (48), an epoch that is not the current one INVALID_PRODUCER_EPOCH (47), and a
//     coordinator outage NOT_ENOUGH_REPLICAS (19, retriable, as Kafka converts it).
//     Nothing of a refused partition is stored. v12 under KIP-890 transactions v2 (the
//     transaction.version feature ApiVersions advertises): the client sends no
//     AddPartitionsToTxn, so the partitions are added to the transaction here (a
//     previous transaction still completing: NOT_ENOUGH_REPLICAS, retriable). Known
//     gap of transactions v1 (as in Kafka before KIP-890): the check and the append
//     are two steps, so a batch the producer itself still has in flight when its
//     EndTxn's markers are written lands after the marker and leaves an open
//     transaction on that partition (clients wait for their produces before EndTxn;
//     WriteTxnMarkers, kafka-transactions.sh abort, ends it). Under v2 the epoch bump
//     at every end fences such a batch.
//     Batches that are not transactional
//     take the idempotent path unchanged, with or without a transactional id.
//   - With the authorizer on (authorizer.go): a request with a transactional batch
//     needs a transactional id with WRITE on it, else
//     TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition; WRITE on each topic,
//     else TOPIC_AUTHORIZATION_FAILED (whether it exists or not); auto-creation needs
//     CREATE on the cluster or the topic, else the topic is not created and is
//     UNKNOWN_TOPIC_OR_PARTITION (Kafka's Produce creates nothing).
//   - Storage outages are retriable codes (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
//     KAFKA_STORAGE_ERROR), never UNKNOWN_SERVER_ERROR (the Java client would turn that
//     into duplicates).
//   - Storage writes of one connection's produce requests keep request order (Turn), so
//     pipelined idempotent batches arrive in sequence order. They go on one AppendStream
//     per connection (appendstream.go): the Turn is held only until the request is
//     sent, so the connection's in-flight requests are written while earlier ones wait
//     for their fsync, and share it. A broken stream fails its waiting requests with
//     NOT_LEADER_OR_FOLLOWER (retriable); the next produce opens a new stream.
//
// KIPs: KIP-98 (idempotence, v3), KIP-110/KIP-390 (compression, kept as sent), KIP-467
// (per-record errors, v8: not filled), KIP-482 (flexible v9+), KIP-951 (current leader
// tags: not sent), KIP-890 (v12).

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func init() { register(kmsg.Produce.Int16(), 0, 12, (*Handler).handleProduce) }

// produceMinTimeout is the least time a produce is given to reach storage-core.
const produceMinTimeout = 30 * time.Second

func (h *Handler) handleProduce(ctx context.Context, r *Request) (kmsg.Response, error) {
	req := r.Body.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)

	// Skeleton in request order, one entry per distinct topic and partition (as Kafka's
	// response, built from a map keyed by partition); every partition starts as "not
	// written". at[ti][pi] is the response slot of request partition (ti, pi); only the
	// last occurrence of a partition listed more than once is written (Kafka collects
	// the records per partition in a map, so the later entry replaces the earlier).
	at, last := dedupeProduce(req, resp)
	setAll := func(code int16) {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = code
			}
		}
	}
	respond := func() (kmsg.Response, error) {
		if req.Acks != 0 {
			return resp, nil
		}
		// acks=0 gets no answer; like Kafka, close the connection when a partition
		// failed so the client refreshes its metadata instead of writing into a void.
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return nil, fmt.Errorf("%w: topic %q partition %d: %s", ErrAcksZeroFailed, t.Topic, p.Partition, kerr.ErrorForCode(p.ErrorCode))
				}
			}
		}
		return nil, nil
	}

	switch {
	case req.Version < 3:
		setAll(kerr.UnsupportedVersion.Code)
		return respond()
	case req.Acks != 0 && req.Acks != 1 && req.Acks != -1:
		setAll(kerr.InvalidRequiredAcks.Code)
		return resp, nil
	}

	// Authorization (Kafka's handleProduceRequest): WRITE on the transactional id for
	// the whole request, then WRITE per topic; auto-creation also needs CREATE.
	x := h.access(ctx, r)
	if x != nil && hasTransactionalBatch(req) && (req.TransactionID == nil || !x.txnID(kafkaacl.OpWrite, *req.TransactionID)) {
		setAll(kerr.TransactionalIDAuthorizationFailed.Code)
		return respond()
	}
	denied := map[string]bool{}
	// Resolve topics (auto-create when enabled).
	var names []string
	for _, t := range req.Topics {
		if !x.topic(kafkaacl.OpWrite, t.Topic) {
			denied[t.Topic] = true
		} else if validTopicName(t.Topic) {
			names = append(names, t.Topic)
		}
	}
	infos, codes, coordErr := h.resolveTopics(ctx, names, true, x.createCheck())
	// A partition beyond the cached count may have been added through another
	// replica: read those topics again before answering UNKNOWN_TOPIC_OR_PARTITION.
	var stale []string
	for _, t := range req.Topics {
		if info := infos[t.Topic]; info != nil {
			for _, p := range t.Partitions {
				if p.Partition >= info.Partitions && p.Partition < channel.MaxPartitions {
					stale = append(stale, t.Topic)
					break
				}
			}
		}
	}
	if len(stale) > 0 {
		fresh, err := h.getTopics(ctx, stale, true)
		if err == nil {
			for n, ti := range fresh {
				infos[n] = ti
			}
		}
	}

	var (
		channels []*storagev1.ChannelBatches
		slots    []produceSlot
		bytesIn  int
		txnParts []txnPart // transactional partitions, stored once verified
	)
	for ti, t := range req.Topics {
		info := infos[t.Topic]
		topicCode := int16(0)
		switch {
		case denied[t.Topic]:
			topicCode = kerr.TopicAuthorizationFailed.Code
		case !validTopicName(t.Topic):
			topicCode = kerr.InvalidTopicException.Code
		case info == nil && coordErr != nil:
			// Coordinator unreachable and topic not cached: let storage-core decide
			// whether the partition's channel exists.
		case info == nil:
			topicCode = codes[t.Topic]
			if topicCode == 0 || topicCode == kerr.TopicAuthorizationFailed.Code {
				// Not created for want of CREATE: as Kafka, whose Produce never
				// creates, an unknown topic.
				topicCode = kerr.UnknownTopicOrPartition.Code
			}
		}
		for pi, p := range t.Partitions {
			if !last[ti][pi] {
				continue
			}
			sl := at[ti][pi]
			rp := &resp.Topics[sl.t].Partitions[sl.p]
			if topicCode != 0 {
				rp.ErrorCode = topicCode
				continue
			}
			if p.Partition < 0 || p.Partition >= channel.MaxPartitions || (info != nil && p.Partition >= info.Partitions) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			bytesIn += len(p.Records)
			if pid, epoch, ok := transactionalBatch(p.Records); ok {
				txnParts = append(txnParts, txnPart{slot: sl, topic: t.Topic, partition: p.Partition,
					pid: pid, epoch: epoch, records: p.Records})
				continue
			}
			// storage-core validates the records (from v3 on exactly one batch per
			// partition, Kafka's ProduceRequest.validateRecords; earlier versions are
			// refused above).
			channels = append(channels, &storagev1.ChannelBatches{
				Channel:     channel.KafkaPartition(t.Topic, p.Partition),
				Batches:     p.Records,
				SingleBatch: true,
			})
			slots = append(slots, sl)
		}
	}
	h.metrics.addProduceBytes(bytesIn)
	if len(txnParts) > 0 {
		codes := h.verifyTxnPartitions(ctx, req.TransactionID, txnParts, req.Version >= 12)
		h.validateRefused(ctx, txnParts, codes)
		for i, tp := range txnParts {
			if codes[i] != 0 {
				resp.Topics[tp.slot.t].Partitions[tp.slot.p].ErrorCode = codes[i]
				continue
			}
			channels = append(channels, &storagev1.ChannelBatches{
				Channel:     channel.KafkaPartition(tp.topic, tp.partition),
				Batches:     tp.records,
				SingleBatch: true,
			})
			slots = append(slots, tp.slot)
		}
	}
	if len(channels) == 0 {
		return respond()
	}

	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout < produceMinTimeout {
		timeout = produceMinTimeout
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := r.Turn.Wait(sctx); err != nil {
		for _, s := range slots {
			resp.Topics[s.t].Partitions[s.p].ErrorCode = kerr.RequestTimedOut.Code
		}
		return respond()
	}
	results, err := h.storeBatches(ctx, sctx, r, channels)
	if err != nil {
		code := dataCode(err)
		h.log.Warn("storage append failed", zap.Int("partitions", len(channels)), zap.Int16("kafka_code", code), zap.Error(err))
		for _, s := range slots {
			resp.Topics[s.t].Partitions[s.p].ErrorCode = code
		}
		return respond()
	}
	for i, s := range slots {
		rp := &resp.Topics[s.t].Partitions[s.p]
		if i >= len(results) {
			rp.ErrorCode = kerr.KafkaStorageError.Code
			continue
		}
		res := results[i]
		if res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			rp.ErrorCode = storageCode(res.GetError())
			if msg := res.GetErrorMessage(); msg != "" && req.Version >= 8 {
				rp.ErrorMessage = &msg
				if res.RecordErrorIndex != nil {
					rp.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{{RelativeOffset: res.GetRecordErrorIndex(), ErrorMessage: &msg}}
				}
			}
			if res.GetError() == storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
				h.topics.invalidate(resp.Topics[s.t].Topic)
			}
			if res.GetLogStartSequence() > 0 {
				rp.LogStartOffset = channel.SequenceToOffset(res.GetLogStartSequence())
			}
			continue
		}
		rp.BaseOffset = channel.SequenceToOffset(res.GetFirstSequence())
		rp.LogAppendTime = -1
		if res.GetLogAppendTimeMs() > 0 {
			rp.LogAppendTime = res.GetLogAppendTimeMs()
		}
		rp.LogStartOffset = channel.SequenceToOffset(res.GetLogStartSequence())
		if rp.LogStartOffset < 0 {
			rp.LogStartOffset = 0
		}
	}
	return respond()
}

// storeBatches writes channels to storage-core. With a Turn (held by the caller, already
// waited for) the request goes on the connection's AppendStream and the Turn is
// finished as soon as it is sent, so the connection's next produce can be sent while
// this one waits for its fsync; without one, or with a Router, it is a unary
// AppendBatches. connCtx is the
// connection's context (the stream's lifetime), ctx bounds this request.
//
// The stream sends the batches by reference (appendWire): until the answer arrives
// gRPC may still be writing them, so on any other outcome the request's body is
// marked in use and is not recycled.
func (h *Handler) storeBatches(connCtx, ctx context.Context, r *Request, channels []*storagev1.ChannelBatches) ([]*storagev1.ChannelAppendResult, error) {
	turn := r.Turn
	if turn == nil || turn.stream == nil || h.router != nil {
		// A Router (several storage nodes) appends unary: the caller finishes the Turn
		// after the answer, so the connection's batches reach the leaders in order.
		// Unary: the codec copies the message before the call returns.
		out, err := h.storage.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: channels})
		return out.GetResults(), err
	}
	r.bodyInUse.Store(true)
	t, err := turn.stream.submit(connCtx, h.storage, channels)
	turn.Finish()
	if err != nil {
		return nil, err
	}
	res, err := t.wait(ctx)
	if err == nil {
		// Answered: storage-core had received all of it, so gRPC is done with it.
		r.bodyInUse.Store(false)
	}
	return res, err
}

// produceSlot is a position in a ProduceResponse: topic index, partition index.
type produceSlot struct{ t, p int }

// txnPart is a partition of a produce whose batch is transactional.
type txnPart struct {
	slot      produceSlot
	topic     string
	partition int32
	pid       int64
	epoch     int16
	records   []byte
}

// verifyTxnPartitions asks the coordinator (verify-only AddPartitionsToTxn) whether
// each partition is in the Ongoing transaction of its batch's producer id and epoch
// under transactional id tid, and returns the Produce code of each, in order: 0 when
// it is, INVALID_PRODUCER_EPOCH for a fenced epoch, NOT_ENOUGH_REPLICAS when the
// coordinator cannot be asked or the previous transaction is still being completed
// (CONCURRENT_TRANSACTIONS; both retriable), INVALID_TXN_STATE otherwise (tid nil or
// empty included). With add (Produce v12, KIP-890 transactions v2) the partitions are
// added to the transaction instead of checked, as the client sends no
// AddPartitionsToTxn.
func (h *Handler) verifyTxnPartitions(ctx context.Context, tid *string, parts []txnPart, add bool) []int16 {
	codes := make([]int16, len(parts))
	if tid == nil || *tid == "" {
		for i := range codes {
			codes[i] = kerr.InvalidTxnState.Code
		}
		return codes
	}
	// One verify-only transaction per producer id and epoch (normally one), one
	// partition per topic entry, so the answers map back by position.
	type producer struct {
		pid   int64
		epoch int16
	}
	index := map[producer]int{}
	creq := &coordinatorv1.AddPartitionsToTxnRequest{}
	where := make([][2]int, len(parts))
	for i, p := range parts {
		k := producer{p.pid, p.epoch}
		xi, ok := index[k]
		if !ok {
			xi = len(creq.Transactions)
			index[k] = xi
			creq.Transactions = append(creq.Transactions, &coordinatorv1.TxnAddition{TransactionalId: *tid,
				ProducerId: p.pid, ProducerEpoch: int32(p.epoch), VerifyOnly: !add})
		}
		x := creq.Transactions[xi]
		where[i] = [2]int{xi, len(x.Topics)}
		x.Topics = append(x.Topics, &coordinatorv1.TxnTopic{Name: p.topic, Partitions: []int32{p.partition}})
	}
	cctx, cancel := context.WithTimeout(ctx, coordTimeout)
	defer cancel()
	out, err := h.txns.AddPartitionsToTxn(cctx, creq)
	if err != nil {
		h.log.Warn("coordinator transaction check failed", zap.Error(err))
	}
	for i, w := range where {
		if err != nil {
			codes[i] = kerr.NotEnoughReplicas.Code
			continue
		}
		code := int32(kerr.InvalidTxnState.Code)
		if rs := out.GetResults(); w[0] < len(rs) && w[1] < len(rs[w[0]].GetTopics()) {
			if ps := rs[w[0]].GetTopics()[w[1]].GetPartitions(); len(ps) == 1 {
				code = ps[0].GetErrorCode()
			}
		}
		switch code {
		case 0:
			codes[i] = 0
		case int32(kerr.ProducerFenced.Code), int32(kerr.InvalidProducerEpoch.Code):
			codes[i] = kerr.InvalidProducerEpoch.Code
		case int32(kerr.ConcurrentTransactions.Code):
			codes[i] = kerr.NotEnoughReplicas.Code
		default:
			codes[i] = kerr.InvalidTxnState.Code
		}
	}
	return codes
}

// validateRefused asks storage-core to validate, storing nothing (validate_only), the
// batches of the transactional partitions whose verification failed (codes[i] != 0),
// and puts storage-core's code in place of the verification's where it refuses the
// batch: a corrupt batch is CORRUPT_MESSAGE whatever its damaged transactional bit or
// producer fields made the verification answer. When storage-core cannot be asked,
// the verification's codes stand (nothing is stored either way).
func (h *Handler) validateRefused(ctx context.Context, parts []txnPart, codes []int16) {
	var (
		req = &storagev1.AppendBatchesRequest{}
		at  []int
	)
	for i, p := range parts {
		if codes[i] != 0 {
			req.Channels = append(req.Channels, &storagev1.ChannelBatches{Channel: channel.KafkaPartition(p.topic, p.partition),
				Batches: p.records, SingleBatch: true, ValidateOnly: true})
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, produceMinTimeout)
	defer cancel()
	out, err := h.storage.AppendBatches(sctx, req)
	if err != nil {
		h.log.Warn("storage validation of refused transactional batches failed", zap.Int("partitions", len(at)), zap.Error(err))
		return
	}
	for j, res := range out.GetResults() {
		if j < len(at) && res.GetError() != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			codes[at[j]] = storageCode(res.GetError())
		}
	}
}

// dedupeProduce fills resp with one topic per distinct topic name and one partition
// per distinct partition of it, in order of first appearance, each "not written"
// (offsets -1). It returns, for every request partition (ti, pi), its response slot,
// and whether it is the last occurrence of its topic and partition: the one whose
// records count. Kafka (KafkaApis.handleProduceRequest) gathers the partitions into a
// map keyed by topic-partition, so a partition listed twice is appended once, with
// the later entry's records, and answered once.
func dedupeProduce(req *kmsg.ProduceRequest, resp *kmsg.ProduceResponse) ([][]produceSlot, [][]bool) {
	type tp struct {
		topic string
		part  int32
	}
	topicAt := make(map[string]int, len(req.Topics))
	partAt := make(map[tp]produceSlot)
	lastOf := make(map[tp][2]int)
	at := make([][]produceSlot, len(req.Topics))
	for ti, t := range req.Topics {
		rti, ok := topicAt[t.Topic]
		if !ok {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			rt.TopicID = t.TopicID
			rti = len(resp.Topics)
			resp.Topics = append(resp.Topics, rt)
			topicAt[t.Topic] = rti
		}
		at[ti] = make([]produceSlot, len(t.Partitions))
		for pi, p := range t.Partitions {
			k := tp{t.Topic, p.Partition}
			sl, ok := partAt[k]
			if !ok {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.BaseOffset = -1
				rp.LogAppendTime = -1
				rp.LogStartOffset = -1
				sl = produceSlot{rti, len(resp.Topics[rti].Partitions)}
				resp.Topics[rti].Partitions = append(resp.Topics[rti].Partitions, rp)
				partAt[k] = sl
			}
			at[ti][pi] = sl
			lastOf[k] = [2]int{ti, pi}
		}
	}
	last := make([][]bool, len(req.Topics))
	for ti, t := range req.Topics {
		last[ti] = make([]bool, len(t.Partitions))
	}
	for _, l := range lastOf {
		last[l[0]][l[1]] = true
	}
	return at, last
}

// hasTransactionalBatch reports whether any partition of req carries a transactional
// batch (Kafka's ProduceRequest.hasTransactionalRecords).
func hasTransactionalBatch(req *kmsg.ProduceRequest) bool {
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if _, _, ok := transactionalBatch(p.Records); ok {
				return true
			}
		}
	}
	return false
}
