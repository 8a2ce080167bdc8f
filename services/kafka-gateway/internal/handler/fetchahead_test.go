package handler

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// TestFetchAhead: a consumer reading a backlog one small fetch at a time gets every
// batch in order, at the right offsets, while its next fetch is served from the range
// read ahead after the previous answer; at the end of the log nothing is read ahead.
func TestFetchAhead(t *testing.T) {
	e := newEnv(t, nil)
	if tp := e.createTopic(t, "fa", 1, nil); tp.ErrorCode != 0 {
		t.Fatalf("create: %d", tp.ErrorCode)
	}
	const n = 6
	for i := range n {
		if p := e.produce(t, "fa", 0, fake.Batch("a", "b")); p.ErrorCode != 0 || p.BaseOffset != int64(2*i) {
			t.Fatalf("produce %d: %+v", i, p)
		}
	}
	ch := channel.KafkaPartition("fa", 0)
	hits := 0
	for off := int64(0); off < 2*n; off += 2 {
		if e.h.ahead.has(ch, off+1) {
			hits++
		}
		req := fetchReq("fa", [16]byte{}, 0, off)
		req.Topics[0].Partitions[0].PartitionMaxBytes = 1 // one batch per fetch
		p := e.do(t, req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 || len(p.RecordBatches) < 61 {
			t.Fatalf("fetch %d: code %d, %d bytes", off, p.ErrorCode, len(p.RecordBatches))
		}
		if base := int64(binary.BigEndian.Uint64(p.RecordBatches)); base != off {
			t.Fatalf("fetch %d returned the batch at %d", off, base)
		}
		if p.HighWatermark != 2*n {
			t.Fatalf("fetch %d: high watermark %d", off, p.HighWatermark)
		}
		// The read-ahead call runs in the background: wait for it to be registered.
		deadline := time.Now().Add(5 * time.Second)
		for off+2 < 2*n && !e.h.ahead.has(ch, off+3) {
			if time.Now().After(deadline) {
				t.Fatalf("no read-ahead after the fetch at %d", off)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if hits != n-1 {
		t.Fatalf("%d fetches found their range read ahead, want %d", hits, n-1)
	}
	if e.h.ahead.has(ch, 2*n+1) {
		t.Fatal("read ahead past the high watermark")
	}
}
