package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// TestFetchByReferenceConcurrentLongPoll runs Fetches of one channel at once while it
// is appended to: long polls that take several rounds (their earlier reads go back to
// the pool), calls cancelled mid-wait and plain reads. Every answer must be the bytes
// stored from its sequence on: a pooled buffer reused while still being sent would
// show up as another call's bytes.
func TestFetchByReferenceConcurrentLongPoll(t *testing.T) {
	c, stop := startServer(t, t.TempDir())
	defer stop()
	ctx := context.Background()
	const ch = "kafka.lp"
	if _, err := c.CreateChannel(ctx, &storagev1.CreateChannelRequest{Name: ch}); err != nil {
		t.Fatal(err)
	}
	const batches = 300
	var appended [][]byte
	for i := range batches {
		appended = append(appended, kafkaBatch(t, -1, -1, -1, string(bytes.Repeat([]byte{byte(1 + i%250)}, 300+i%97))))
	}
	type answer struct {
		from int64
		got  []byte
	}
	var mu sync.Mutex
	var answers []answer
	cancelled := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, b := range appended {
			if _, err := c.AppendBatches(ctx, &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: ch, Batches: b}}}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	errs := make(chan string, 64)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				r, err := c.Fetch(ctx, &storagev1.FetchRequest{Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: 1}}})
				if err != nil {
					errs <- err.Error()
					return
				}
				hw := r.Results[0].HighWatermark
				if hw >= batches {
					return
				}
				from := hw + 1 - int64(i%3)
				cctx, cancel := context.WithTimeout(ctx, time.Duration(1+(w+i)%60)*time.Millisecond)
				resp, err := c.Fetch(cctx, &storagev1.FetchRequest{MaxWaitMs: 30, MinBytes: 3000, Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: max(from, 1), MaxBytes: 1 << 20}}})
				cancel()
				if err != nil { // cancelled: the call's buffers must go back safely
					mu.Lock()
					cancelled++
					mu.Unlock()
					continue
				}
				mu.Lock()
				answers = append(answers, answer{max(from, 1), resp.Results[0].Batches})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	// The stored frames (with the offsets the store gave them), read once at rest.
	all, err := c.Fetch(ctx, &storagev1.FetchRequest{MaxBytes: 64 << 20, Channels: []*storagev1.FetchChannel{{Channel: ch, FromSequence: 1, MaxBytes: 64 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte // frames[i] holds sequence i+1
	for b := all.Results[0].Batches; len(b) >= 12; {
		n := 12 + int(binary.BigEndian.Uint32(b[8:]))
		frames, b = append(frames, b[:n]), b[n:]
	}
	if len(frames) != batches {
		t.Fatalf("%d frames stored, %d appended", len(frames), batches)
	}
	long := 0
	for _, a := range answers {
		var want []byte
		for s := a.from; len(want) < len(a.got) && s <= int64(len(frames)); s++ {
			want = append(want, frames[s-1]...)
		}
		if !bytes.Equal(a.got, want) {
			t.Fatalf("from %d: %d bytes fetched differ from the stored ones", a.from, len(a.got))
		}
		if len(a.got) > 0 {
			long++
		}
	}
	if long == 0 || cancelled == 0 {
		t.Fatalf("%d answers with data, %d calls cancelled: the test did not exercise both", long, cancelled)
	}
	t.Logf("%d answers checked, %d with data, %d calls cancelled", len(answers), long, cancelled)
}
