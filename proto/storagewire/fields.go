package storagewire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of the messages encoded here (storage.proto, queue.proto). The tests
// check each against the message descriptors.
const (
	// AppendStreamRequest.
	fAppendID       protowire.Number = 1
	fAppendChannels protowire.Number = 2
	// ChannelBatches.
	fBatchesChannel      protowire.Number = 1
	fBatchesBatches      protowire.Number = 2
	fBatchesSingleBatch  protowire.Number = 3
	fBatchesValidateOnly protowire.Number = 4

	// FetchResponse.
	fFetchResults protowire.Number = 1
	// FetchChannelResult.
	fResultChannel            protowire.Number = 1
	fResultError              protowire.Number = 2
	fResultHighWatermark      protowire.Number = 3
	fResultLastStableSequence protowire.Number = 4
	fResultLogStartSequence   protowire.Number = 5
	fResultBatches            protowire.Number = 6
	fResultAborted            protowire.Number = 7
	// AbortedTransaction.
	fAbortedProducerID    protowire.Number = 1
	fAbortedFirstSequence protowire.Number = 2

	// ReceiveResponse.
	fReceiveMessages  protowire.Number = 1
	fReceiveNextBytes protowire.Number = 2
	// ReceivedMessage.
	fMsgAckID    protowire.Number = 1
	fMsgRecord   protowire.Number = 2
	fMsgSource   protowire.Number = 3
	fMsgSourceSq protowire.Number = 4
	fMsgAttempt  protowire.Number = 5
	// Record.
	fRecSequence      protowire.Number = 1
	fRecTimestamp     protowire.Number = 2
	fRecKey           protowire.Number = 3
	fRecValue         protowire.Number = 4
	fRecHeaders       protowire.Number = 5
	fRecProducerID    protowire.Number = 6
	fRecProducerEpoch protowire.Number = 7
	fRecTransactional protowire.Number = 8
	fRecControl       protowire.Number = 9
	// Header.
	fHdrKey   protowire.Number = 1
	fHdrValue protowire.Number = 2
)

// bytesField is the size of a length-delimited field of n bytes with a one-byte tag.
func bytesField(n int) int { return 1 + protowire.SizeBytes(n) }

// varintField is the size of a varint field with a one-byte tag, 0 when v is zero
// (proto3 omits it).
func varintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// stringField is the size of a proto3 string field with a one-byte tag, 0 when empty.
func stringField(s string) int {
	if s == "" {
		return 0
	}
	return bytesField(len(s))
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(protowire.AppendTag(b, num, protowire.VarintType), 1)
}
