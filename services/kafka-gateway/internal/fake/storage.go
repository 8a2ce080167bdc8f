// Package fake holds in-process fakes of the storage-core and coordinator gRPC clients
// for the gateway's tests. They keep everything in memory and follow the protos'
// contracts closely enough for real Kafka clients to work against the gateway.
package fake

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// DefaultMaxMessageBytes is the per-batch limit of fake channels (Kafka's default).
const DefaultMaxMessageBytes = 1048588

type batch struct {
	first, last int64 // sequences
	maxTS       int64
	data        []byte
}

type log struct {
	maxMessageBytes int
	logStart        int64 // sequence of first retained record
	next            int64 // next sequence
	batches         []batch
}

// Storage is an in-memory storagev1.StorageServiceClient. Methods not overridden
// panic (nil embedded interface).
type Storage struct {
	storagev1.StorageServiceClient

	mu       sync.Mutex
	logs     map[string]*log
	appended chan struct{} // closed and replaced on every append

	// Err, when set, fails every call with it (simulates an outage).
	Err error
	// AppendCalls counts AppendBatches calls; FetchCalls counts Fetch calls.
	AppendCalls, FetchCalls int
}

// NewStorage returns an empty fake storage.
func NewStorage() *Storage {
	return &Storage{logs: map[string]*log{}, appended: make(chan struct{})}
}

// Create makes a channel (idempotent).
func (s *Storage) Create(name string, maxMessageBytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.logs[name]; ok {
		return
	}
	if maxMessageBytes <= 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	s.logs[name] = &log{maxMessageBytes: maxMessageBytes, logStart: 1, next: 1}
}

// Delete removes a channel.
func (s *Storage) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.logs, name)
}

// SetFailure sets or clears the outage error.
func (s *Storage) SetFailure(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Err = err
}

// Calls returns how many Fetch calls were made.
func (s *Storage) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.FetchCalls
}

// HighWatermark returns a channel's high watermark (last sequence), -1 if missing.
func (s *Storage) HighWatermark(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.logs[name]
	if !ok {
		return -1
	}
	return l.next - 1
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkFraming answers storage-core's framing pass (store.checkFraming) for the
// frames b, in the same order: empty, frame lengths, magic 2, the CRC of a
// transactional or control frame, control frames, and with single exactly one frame.
func checkFraming(b []byte, single bool) storagev1.ErrorCode {
	const (
		corrupt = storagev1.ErrorCode_ERROR_CODE_CORRUPT_BATCH
		invalid = storagev1.ErrorCode_ERROR_CODE_INVALID_RECORD
	)
	if len(b) == 0 && single {
		return invalid
	}
	if len(b) == 0 {
		return corrupt
	}
	frames := 0
	for ; len(b) > 0; frames++ {
		if len(b) < 17 {
			return corrupt
		}
		n := int64(int32(binary.BigEndian.Uint32(b[8:]))) + 12
		switch {
		case n < 12 || n > int64(len(b)):
			return corrupt
		case b[16] != 2:
			return invalid
		case n < 61:
			return corrupt
		case b[22]&0x30 != 0 && crc32.Checksum(b[21:n], castagnoli) != binary.BigEndian.Uint32(b[17:]):
			return corrupt
		case b[22]&0x20 != 0:
			return invalid
		}
		b = b[n:]
	}
	if single && frames > 1 {
		return invalid
	}
	return 0
}

// AppendBatches implements storagev1.StorageServiceClient: checkFraming, then per
// frame the size limit and CRC; with validate_only nothing is stored.
func (s *Storage) AppendBatches(_ context.Context, req *storagev1.AppendBatchesRequest, _ ...grpc.CallOption) (*storagev1.AppendBatchesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.AppendCalls++
	if s.Err != nil {
		return nil, s.Err
	}
	resp := &storagev1.AppendBatchesResponse{}
	appended := false
	for _, cb := range req.GetChannels() {
		res := &storagev1.ChannelAppendResult{Channel: cb.GetChannel(), LogAppendTimeMs: -1}
		resp.Results = append(resp.Results, res)
		l, ok := s.logs[cb.GetChannel()]
		if !ok {
			res.Error = storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND
			continue
		}
		res.LogStartSequence = l.logStart
		if res.Error = checkFraming(cb.GetBatches(), cb.GetSingleBatch()); res.Error != 0 {
			continue
		}
		var parsed []batch
		b := cb.GetBatches()
		next := l.next
		for len(b) > 0 && res.Error == 0 {
			n := int(binary.BigEndian.Uint32(b[8:])) + 12
			if n > l.maxMessageBytes {
				res.Error = storagev1.ErrorCode_ERROR_CODE_BATCH_TOO_LARGE
				break
			}
			if crc32.Checksum(b[21:n], castagnoli) != binary.BigEndian.Uint32(b[17:]) {
				res.Error = storagev1.ErrorCode_ERROR_CODE_CORRUPT_BATCH
				break
			}
			count := int64(binary.BigEndian.Uint32(b[57:]))
			data := append([]byte(nil), b[:n]...)
			binary.BigEndian.PutUint64(data[0:], uint64(next-1)) // base offset
			parsed = append(parsed, batch{first: next, last: next + count - 1, maxTS: int64(binary.BigEndian.Uint64(b[35:])), data: data})
			next += count
			b = b[n:]
		}
		if res.Error != 0 || cb.GetValidateOnly() {
			continue
		}
		res.FirstSequence = l.next
		l.batches = append(l.batches, parsed...)
		l.next = next
		appended = true
	}
	if appended {
		close(s.appended)
		s.appended = make(chan struct{})
	}
	return resp, nil
}

// Fetch implements storagev1.StorageServiceClient (long-polls up to max_wait_ms).
func (s *Storage) Fetch(ctx context.Context, req *storagev1.FetchRequest, _ ...grpc.CallOption) (*storagev1.FetchResponse, error) {
	deadline := time.Now().Add(time.Duration(req.GetMaxWaitMs()) * time.Millisecond)
	s.mu.Lock()
	s.FetchCalls++
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if s.Err != nil {
			err := s.Err
			s.mu.Unlock()
			return nil, err
		}
		resp, total := s.fetchLocked(req)
		wake := s.appended
		s.mu.Unlock()
		if total >= int(req.GetMinBytes()) && total > 0 || !time.Now().Before(deadline) {
			return resp, nil
		}
		hasErr := false
		for _, r := range resp.Results {
			hasErr = hasErr || r.Error != 0
		}
		if hasErr {
			return resp, nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		t.Stop()
	}
}

func (s *Storage) fetchLocked(req *storagev1.FetchRequest) (*storagev1.FetchResponse, int) {
	resp := &storagev1.FetchResponse{}
	total := 0
	for _, fc := range req.GetChannels() {
		res := &storagev1.FetchChannelResult{Channel: fc.GetChannel()}
		resp.Results = append(resp.Results, res)
		l, ok := s.logs[fc.GetChannel()]
		if !ok {
			res.Error = storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND
			continue
		}
		res.HighWatermark = l.next - 1
		res.LastStableSequence = l.next - 1
		res.LogStartSequence = l.logStart
		from := fc.GetFromSequence()
		if from < l.logStart || from > l.next {
			res.Error = storagev1.ErrorCode_ERROR_CODE_SEQUENCE_OUT_OF_RANGE
			continue
		}
		limit := int(fc.GetMaxBytes())
		if rem := int(req.GetMaxBytes()) - total; req.GetMaxBytes() > 0 && rem < limit {
			limit = rem
		}
		var out []byte
		for _, b := range l.batches {
			if b.last < from {
				continue
			}
			if len(out) > 0 && len(out)+len(b.data) > limit {
				break
			}
			if len(out) == 0 && total > 0 && len(b.data) > limit {
				break
			}
			out = append(out, b.data...)
		}
		res.Batches = out
		total += len(out)
	}
	return resp, total
}

// LookupSequence implements storagev1.StorageServiceClient.
func (s *Storage) LookupSequence(_ context.Context, req *storagev1.LookupSequenceRequest, _ ...grpc.CallOption) (*storagev1.LookupSequenceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Err != nil {
		return nil, s.Err
	}
	l, ok := s.logs[req.GetChannel()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	switch ts := req.GetTimestampMs(); ts {
	case -1:
		return &storagev1.LookupSequenceResponse{Sequence: l.next, TimestampMs: -1, Found: true}, nil
	case -2:
		return &storagev1.LookupSequenceResponse{Sequence: l.logStart, TimestampMs: -1, Found: true}, nil
	case -3:
		var best *batch
		for i := range l.batches {
			if best == nil || l.batches[i].maxTS > best.maxTS {
				best = &l.batches[i]
			}
		}
		if best == nil {
			return &storagev1.LookupSequenceResponse{}, nil
		}
		return &storagev1.LookupSequenceResponse{Sequence: best.last, TimestampMs: best.maxTS, Found: true}, nil
	default:
		for _, b := range l.batches {
			if b.maxTS >= ts && b.last >= l.logStart {
				seq := b.first
				if seq < l.logStart {
					seq = l.logStart
				}
				return &storagev1.LookupSequenceResponse{Sequence: seq, TimestampMs: b.maxTS, Found: true}, nil
			}
		}
		return &storagev1.LookupSequenceResponse{}, nil
	}
}

// DeleteRecords implements storagev1.StorageServiceClient.
func (s *Storage) DeleteRecords(_ context.Context, req *storagev1.DeleteRecordsRequest, _ ...grpc.CallOption) (*storagev1.DeleteRecordsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Err != nil {
		return nil, s.Err
	}
	l, ok := s.logs[req.GetChannel()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	before := req.GetBeforeSequence()
	if before == -1 {
		before = l.next
	}
	if before < 1 || before > l.next {
		return nil, status.Error(codes.OutOfRange, "before_sequence out of range")
	}
	if before > l.logStart {
		l.logStart = before
	}
	return &storagev1.DeleteRecordsResponse{LogStartSequence: l.logStart}, nil
}

// GetChannel implements storagev1.StorageServiceClient.
func (s *Storage) GetChannel(_ context.Context, req *storagev1.GetChannelRequest, _ ...grpc.CallOption) (*storagev1.GetChannelResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Err != nil {
		return nil, s.Err
	}
	l, ok := s.logs[req.GetName()]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such channel")
	}
	return &storagev1.GetChannelResponse{Channel: &storagev1.Channel{
		Name: req.GetName(), LogStartSequence: l.logStart, HighWatermark: l.next - 1,
		Config: &storagev1.ChannelConfig{MaxMessageBytes: int32(l.maxMessageBytes)},
	}}, nil
}
