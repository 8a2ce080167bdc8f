package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// TestAppendedLoadMatchesLogRead: records a binding copies are loaded into the window
// as they are appended (loadAppended), not read back from the queue log. What a
// Receive hands out that way is what the queue log holds: the same offsets,
// timestamps, null and empty keys, values and header values, producer fields, source and sequence as
// the redelivery after a restart, which reads them from the log.
func TestAppendedLoadMatchesLogRead(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.a", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	recs := []store.NewRecord{
		{Timestamp: 1_600_000_000_123, Key: nil, Value: []byte("v0")},
		{Timestamp: 1_600_000_000_456, Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: nil, Headers: []store.Header{{Key: "null", Value: nil}, {Key: "empty", Value: []byte{}}}},
		{Key: []byte("k2"), Value: []byte("v3"), Headers: []store.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("22")}}},
	}
	if _, _, err := src.Append(recs); err != nil {
		t.Fatal(err)
	}
	first := receive(t, q, 10, len(recs))
	if n := testutil.ToFloat64(e.m.opts.Metrics.CopyLoaded); n != float64(len(recs)) {
		t.Fatalf("%v records loaded as appended, want %d (the test covers that path only then)", n, len(recs))
	}
	e.restart()
	e.clk.add(time.Minute) // the first leases end
	q, err := e.m.Get("gcp.sub.a")
	if err != nil {
		t.Fatal(err)
	}
	again := receive(t, q, 10, len(recs))
	if n := testutil.ToFloat64(e.m.opts.Metrics.CopyLoaded); n != 0 {
		t.Fatalf("%v records loaded as appended after the restart, want 0 (read from the log)", n)
	}
	show := func(d Delivery) string {
		r := d.Record
		hs := ""
		for _, h := range r.Headers {
			hs += fmt.Sprintf(" %s=%q(nil %v)", h.Key, h.Value, h.Value == nil)
		}
		return fmt.Sprintf("off %d ts %d key %q(nil %v) value %q(nil %v) headers%s source %s/%d producer %d/%d txn %v control %v",
			r.Offset, r.Timestamp, r.Key, r.Key == nil, r.Value, r.Value == nil, hs, d.Source, d.SourceSeq,
			r.ProducerID, r.ProducerEpoch, r.Transactional, r.Control)
	}
	for i := range recs {
		if a, b := show(first[i]), show(again[i]); a != b {
			t.Errorf("message %d as appended:\n  %s\nread from the log:\n  %s", i, a, b)
		}
		if again[i].Attempt != 2 {
			t.Errorf("message %d: attempt %d after the restart, want 2", i, again[i].Attempt)
		}
	}
}
