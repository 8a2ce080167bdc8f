package queue

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// fillValue is record i's value: bytes of its own, so a message showing another
// record's bytes (a reused read buffer) is caught.
func fillValue(i int) []byte {
	return bytes.Repeat([]byte{byte(i), byte(i >> 8), byte(i*7 + 1)}, 250)
}

// TestFillBufferReuseKeepsDeliveredData: fill reads whole frames into a read buffer
// it reuses (fillStage) and loads them a few messages at a time. Every delivered
// message keeps its own key, value and headers however many reads and refills follow,
// for two queues sharing the buffers, filling concurrently, with acked and unacked
// messages.
func TestFillBufferReuseKeepsDeliveredData(t *testing.T) {
	e := newEnv(t)
	e.m.opts.MaxUnleased = 7 // each Receive makes room for a few messages only
	src := e.log("gcp.t")
	qs := []*Queue{
		e.queue("gcp.sub.a", Config{}, Binding{Source: "gcp.t", StartSequence: 1}),
		e.queue("gcp.sub.b", Config{}, Binding{Source: "gcp.t", StartSequence: 1}),
	}
	const n = 4000 // about 3 MB: several binding frames of about 1 MiB
	for i := 0; i < n; i += 100 {
		recs := make([]store.NewRecord, 100)
		for j := range recs {
			k := i + j
			recs[j] = store.NewRecord{Key: []byte("key-" + strconv.Itoa(k)), Value: fillValue(k),
				Headers: []store.Header{{Key: "_pubsub_message_id", Value: []byte(strconv.Itoa(k))}, {Key: "attr", Value: []byte("a" + strconv.Itoa(k))}}}
		}
		if _, _, err := src.Append(recs); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	got := make([][]Delivery, len(qs))
	for qi, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(20 * time.Second)
			for len(got[qi]) < n && time.Now().Before(deadline) {
				ds, err := q.Receive(context.Background(), 5, 0, 0, 100*time.Millisecond)
				if err != nil {
					t.Error(err)
					return
				}
				if len(ds) > 0 && len(got[qi])%2 == 0 {
					if _, err := q.Ack(ackIDs(ds)); err != nil {
						t.Error(err)
						return
					}
				}
				got[qi] = append(got[qi], ds...)
			}
		}()
	}
	wg.Wait()
	for qi, ds := range got {
		if len(ds) != n {
			t.Fatalf("queue %d: %d messages received, want %d", qi, len(ds), n)
		}
		for i, d := range ds {
			r := d.Record
			if d.SourceSeq != int64(i+1) || d.Source != "gcp.t" || string(r.Key) != "key-"+strconv.Itoa(i) || !bytes.Equal(r.Value, fillValue(i)) ||
				fmt.Sprint(r.Headers) != fmt.Sprint([]store.Header{{Key: "_pubsub_message_id", Value: []byte(strconv.Itoa(i))}, {Key: "attr", Value: []byte("a" + strconv.Itoa(i))}}) {
				t.Fatalf("queue %d message %d changed after later fills: seq %d source %q key %q headers %v value %x...",
					qi, i, d.SourceSeq, d.Source, r.Key, r.Headers, r.Value[:6])
			}
		}
	}
}

// TestFillStageDropsOnRebuild: records read but not loaded yet (the window was full)
// are not loaded into a window rebuilt meanwhile (purge, seek): the rebuilt one loads
// from its own start.
func TestFillStageDropsOnRebuild(t *testing.T) {
	e := newEnv(t)
	e.m.opts.MaxUnleased = 3
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	var vs []string
	for i := 0; i < 10; i++ {
		vs = append(vs, fmt.Sprint(i))
	}
	publish(t, src, vs...)
	receive(t, q, 2, 2) // 0, 1 leased; the other 8 read, 3 of them loaded
	if err := q.Purge(); err != nil {
		t.Fatal(err)
	}
	receive(t, q, 10, 0)
	publish(t, src, "after")
	if got := values(receive(t, q, 10, 1)); got[0] != "after" {
		t.Fatalf("after a purge got %v, want [after]", got)
	}
	if err := q.SeekTime(0, true); err != nil {
		t.Fatal(err)
	}
	var all []string
	for len(all) < 11 {
		ds := receive(t, q, 2, min(2, 11-len(all)))
		mustAck(t, q, ackIDs(ds)...)
		all = append(all, values(ds)...)
	}
	if fmt.Sprint(all) != fmt.Sprint(append(vs, "after")) {
		t.Fatalf("after a seek back got %v", all)
	}
}
