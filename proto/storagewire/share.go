package storagewire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// Field numbers of share.proto's ShareFetchResponse and the messages it holds.
const (
	// ShareFetchResponse.
	fShareAckResults protowire.Number = 1
	fSharePartitions protowire.Number = 2
	// SharePartitionRecords and ShareAckResult (fields 1..4 alike).
	fSPTopic     protowire.Number = 1
	fSPPartition protowire.Number = 2
	fSPError     protowire.Number = 3
	fSPMessage   protowire.Number = 4
	fSPRecords   protowire.Number = 5
	fSPBatches   protowire.Number = 6
	fSPAcquired  protowire.Number = 7
	// ShareAcquiredRange.
	fRangeFirst protowire.Number = 1
	fRangeLast  protowire.Number = 2
	fRangeCount protowire.Number = 3
)

// DecodeShareFetchResponse decodes b into m with each partition's Batches a view of
// b (its capacity capped at the field), as DecodeFetchResponse does for Fetch: a
// ShareFetch answer's batches are the bulk of it, and proto.Unmarshal copies them. It
// handles the fields of ShareFetchResponse, SharePartitionRecords (but its records:
// answers as_batch has none), ShareAckResult and ShareAcquiredRange, in any order, a
// field seen twice keeping its last value as proto.Unmarshal does. For anything else
// (records, an unknown field, a wrong wire type, bad UTF-8, truncation) it reports
// false and m is partly filled: the caller resets m and leaves the input to
// proto.Unmarshal, which reports the errors it always reports.
func DecodeShareFetchResponse(b []byte, m *storagev1.ShareFetchResponse) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num != fShareAckResults && num != fSharePartitions {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == fShareAckResults {
			r := &storagev1.ShareAckResult{}
			if !decodeSharePart(v, false, func(topic string) { r.Topic = topic }, func(p int32) { r.Partition = p },
				func(e int32) { r.Error = storagev1.ShareError(e) }, func(msg string) { r.Message = msg }, nil, nil) {
				return false
			}
			m.AckResults = append(m.AckResults, r)
			continue
		}
		p := &storagev1.SharePartitionRecords{}
		ok := decodeSharePart(v, true, func(topic string) { p.Topic = topic }, func(part int32) { p.Partition = part },
			func(e int32) { p.Error = storagev1.ShareError(e) }, func(msg string) { p.Message = msg },
			func(batches []byte) { p.Batches = batches },
			func(r *storagev1.ShareAcquiredRange) { p.Acquired = append(p.Acquired, r) })
		if !ok {
			return false
		}
		m.Partitions = append(m.Partitions, p)
	}
	return true
}

// decodeSharePart decodes a SharePartitionRecords (partition: batches and acquired
// allowed) or a ShareAckResult, whose fields 1..4 are alike, through the setters.
func decodeSharePart(b []byte, partition bool, topic func(string), part func(int32), errCode func(int32), msg func(string),
	batches func([]byte), acquired func(*storagev1.ShareAcquiredRange)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == fSPTopic || num == fSPMessage || partition && (num == fSPBatches || num == fSPAcquired)) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case fSPTopic, fSPMessage:
				if !utf8.Valid(v) {
					return false
				}
				if num == fSPTopic {
					topic(string(v))
				} else {
					msg(string(v))
				}
			case fSPBatches:
				batches(v[:len(v):len(v)])
			default:
				r := &storagev1.ShareAcquiredRange{}
				if !decodeShareRange(v, r) {
					return false
				}
				acquired(r)
			}
		case (num == fSPPartition || num == fSPError) && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fSPPartition {
				part(int32(v))
			} else {
				errCode(int32(v))
			}
		default:
			return false
		}
	}
	return true
}

// decodeShareRange decodes one ShareAcquiredRange.
func decodeShareRange(b []byte, r *storagev1.ShareAcquiredRange) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || num < fRangeFirst || num > fRangeCount {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case fRangeFirst:
			r.FirstOffset = int64(v)
		case fRangeLast:
			r.LastOffset = int64(v)
		default:
			r.DeliveryCount = int32(v)
		}
	}
	return true
}
