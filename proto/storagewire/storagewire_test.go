package storagewire

import (
	"math/rand"
	"slices"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The field numbers the codecs write are the messages' own, and the codecs know every
// field: a field added to one of these messages must be added here too (or, for
// FetchChannelResult, is encoded by proto; see FetchResponseBuffers).
func TestFieldNumbers(t *testing.T) {
	for _, c := range []struct {
		m      protoreflect.ProtoMessage
		fields map[string]protowire.Number
	}{
		{&storagev1.AppendStreamRequest{}, map[string]protowire.Number{"id": fAppendID, "channels": fAppendChannels}},
		{&storagev1.ChannelBatches{}, map[string]protowire.Number{"channel": fBatchesChannel, "batches": fBatchesBatches, "single_batch": fBatchesSingleBatch, "validate_only": fBatchesValidateOnly}},
		{&storagev1.FetchResponse{}, map[string]protowire.Number{"results": fFetchResults}},
		{&storagev1.FetchChannelResult{}, map[string]protowire.Number{
			"channel": fResultChannel, "error": fResultError, "high_watermark": fResultHighWatermark,
			"last_stable_sequence": fResultLastStableSequence, "log_start_sequence": fResultLogStartSequence, "batches": fResultBatches, "aborted_transactions": fResultAborted,
		}},
		{&storagev1.AbortedTransaction{}, map[string]protowire.Number{"producer_id": fAbortedProducerID, "first_sequence": fAbortedFirstSequence}},
		{&storagev1.ReceiveResponse{}, map[string]protowire.Number{"messages": fReceiveMessages, "next_bytes": fReceiveNextBytes}},
		{&storagev1.ReceivedMessage{}, map[string]protowire.Number{
			"ack_id": fMsgAckID, "record": fMsgRecord, "source": fMsgSource, "source_sequence": fMsgSourceSq, "delivery_attempt": fMsgAttempt,
		}},
		{&storagev1.Record{}, map[string]protowire.Number{
			"sequence": fRecSequence, "timestamp_ms": fRecTimestamp, "key": fRecKey, "value": fRecValue, "headers": fRecHeaders,
			"producer_id": fRecProducerID, "producer_epoch": fRecProducerEpoch, "transactional": fRecTransactional, "control": fRecControl,
		}},
		{&storagev1.Header{}, map[string]protowire.Number{"key": fHdrKey, "value": fHdrValue}},
		{&storagev1.ShareFetchResponse{}, map[string]protowire.Number{"ack_results": fShareAckResults, "partitions": fSharePartitions}},
		{&storagev1.SharePartitionRecords{}, map[string]protowire.Number{
			"topic": fSPTopic, "partition": fSPPartition, "error": fSPError, "message": fSPMessage,
			"records": fSPRecords, "batches": fSPBatches, "acquired": fSPAcquired,
		}},
		{&storagev1.ShareAckResult{}, map[string]protowire.Number{"topic": fSPTopic, "partition": fSPPartition, "error": fSPError, "message": fSPMessage}},
		{&storagev1.ShareAcquiredRange{}, map[string]protowire.Number{"first_offset": fRangeFirst, "last_offset": fRangeLast, "delivery_count": fRangeCount}},
	} {
		md := c.m.ProtoReflect().Descriptor()
		fs := md.Fields()
		if fs.Len() != len(c.fields) {
			t.Errorf("%s has %d fields, the codecs know %d", md.FullName(), fs.Len(), len(c.fields))
		}
		for name, num := range c.fields {
			f := fs.ByName(protoreflect.Name(name))
			if f == nil || f.Number() != num {
				t.Errorf("%s.%s: the codecs write field %d, the descriptor says %v", md.FullName(), name, num, f)
			}
		}
	}
}

// randomBytes is nil, empty or up to max random bytes.
func randomBytes(rnd *rand.Rand, max int) []byte {
	switch rnd.Intn(4) {
	case 0:
		return nil
	case 1:
		return []byte{}
	}
	b := make([]byte, rnd.Intn(max+1))
	rnd.Read(b)
	return b
}

// randomInt64 is zero, negative, small or large.
func randomInt64(rnd *rand.Rand) int64 {
	switch rnd.Intn(4) {
	case 0:
		return 0
	case 1:
		return -1 - rnd.Int63n(1<<40)
	case 2:
		return rnd.Int63n(200)
	}
	return rnd.Int63()
}

// referenced reports whether b is one of bs's buffers, not a copy.
func referenced(bs mem.BufferSlice, b []byte) bool {
	return slices.ContainsFunc(bs, func(x mem.Buffer) bool {
		d := x.ReadOnlyData()
		return len(d) > 0 && len(b) > 0 && &d[0] == &b[0]
	})
}
