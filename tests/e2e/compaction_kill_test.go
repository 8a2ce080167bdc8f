package e2e

import (
	"bytes"
	"context"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

var cleanerReadRe = regexp.MustCompile(`(?m)^tributary_storage_cleaner_read_bytes_total (\S+)$`)

// cleanerRead returns storage-core's tributary_storage_cleaner_read_bytes_total.
func cleanerRead(t *testing.T, s *stack.Stack) float64 {
	t.Helper()
	m := cleanerReadRe.FindStringSubmatch(scrape(t, s.Storage.HTTPAddr))
	if m == nil {
		t.Fatal("storage-core /metrics lacks tributary_storage_cleaner_read_bytes_total")
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// checkNoMix fails when a record read is not the record written at its offset, and
// when the newest record of a key written below end is missing (a tombstone may go
// once it is older than delete.retention.ms, which this test's never is).
func checkNoMix(t *testing.T, what string, got, written map[int64]compactKV, end int64) {
	t.Helper()
	for off, g := range got {
		w, ok := written[off]
		if !ok || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) || (g.value == nil) != (w.value == nil) {
			t.Fatalf("%s: offset %d holds %q=%q, written %q=%q (%v)", what, off, g.key, g.value, w.key, w.value, ok)
		}
	}
	for off := range compactedWant(written, end, false) {
		if _, ok := got[off]; !ok {
			t.Fatalf("%s: the newest record of %q (offset %d) is lost", what, written[off].key, off)
		}
	}
}

// TestCompactionKill: storage-core is killed with SIGKILL in the middle of a cleaner
// pass (its read counter moving, the I/O limit making a pass last seconds), ten times,
// each after another 20 versions of 1,000 keys. After every restart each offset holds
// the record written there or nothing, no offset is read twice and no key's newest
// record is lost; at the end the topic is exactly compacted.
func TestCompactionKill(t *testing.T) {
	s := stack.StartT(t, stack.Options{StorageFlags: []string{"--cleaner-backoff=100ms", "--cleaner-io-bytes-per-second=300000"}})
	adm := newAdmin(t, s.KafkaAddrs)
	topic := compactTopic(t, adm, "compactkill", 500, 3_600_000)
	written := map[int64]compactKV{}
	var end int64
	for round := range 10 {
		cl := newClient(t, s.KafkaAddrs, kgo.ProducerLinger(5*time.Millisecond), kgo.RetryTimeout(time.Minute))
		produceVersions(t, cl, topic, 1000, round*20, round*20+20, written)
		time.Sleep(600 * time.Millisecond)
		sentinel := &kgo.Record{Topic: topic, Key: []byte("sentinel"), Value: []byte(strconv.Itoa(round))}
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), sentinel).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cl.Close()
		written[sentinel.Offset] = compactKV{sentinel.Key, sentinel.Value}
		end = sentinel.Offset
		before := cleanerRead(t, s)
		deadline := time.Now().Add(30 * time.Second)
		for cleanerRead(t, s) == before {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the cleaner did not start within 30 s", round)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(2500)) * time.Millisecond)
		killedAt := cleanerRead(t, s)
		if err := s.KillStorage(); err != nil {
			t.Fatal(err)
		}
		if err := s.RestartStorage(ctxT(t, 60*time.Second)); err != nil {
			t.Fatal(err)
		}
		got := readKgo(t, s.KafkaAddrs, topic)
		checkNoMix(t, "round "+strconv.Itoa(round), got, written, end)
		t.Logf("round %d: killed after the cleaner read %.0f bytes; %d records of %d written read back", round, killedAt-before, len(got), len(written))
	}
	waitCompacted(t, "after the kills", 90*time.Second, compactedWant(written, end, false), func() map[int64]compactKV { return readKgo(t, s.KafkaAddrs, topic) })
}

// TestCompactionWhileConsuming: kgo consumers read a compacted topic from the start,
// again and again, while the cleaner (slowed by its I/O limit) rewrites it: no consumer
// sees an offset go back or a record twice, and every record is the one written at its
// offset; some passes read the topic partly cleaned (more records than a compacted
// topic holds, fewer than were written).
func TestCompactionWhileConsuming(t *testing.T) {
	s := stack.StartT(t, stack.Options{StorageFlags: []string{"--cleaner-backoff=100ms", "--cleaner-io-bytes-per-second=600000"}})
	adm := newAdmin(t, s.KafkaAddrs)
	topic := compactTopic(t, adm, "compactread", 500, 3_600_000)
	written := map[int64]compactKV{}
	cl := newClient(t, s.KafkaAddrs, kgo.ProducerLinger(5*time.Millisecond))
	produceVersions(t, cl, topic, 1000, 0, 100, written)
	time.Sleep(600 * time.Millisecond)
	sentinel := &kgo.Record{Topic: topic, Key: []byte("sentinel"), Value: []byte("end")}
	if err := cl.ProduceSync(ctxT(t, 30*time.Second), sentinel).FirstErr(); err != nil {
		t.Fatal(err)
	}
	written[sentinel.Offset] = compactKV{sentinel.Key, sentinel.Value}
	end := sentinel.Offset
	want := compactedWant(written, end, false)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failure string
	passes, across := 0, 0
	done := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				c, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaAddrs...),
					kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(0)}}), kgo.FetchMaxBytes(256<<10), kgo.FetchMaxPartitionBytes(64<<10))
				if err != nil {
					mu.Lock()
					failure = err.Error()
					mu.Unlock()
					return
				}
				last, n := int64(-1), 0
				for last < end && ctx.Err() == nil {
					fs := c.PollFetches(ctx)
					fs.EachRecord(func(r *kgo.Record) {
						w := written[r.Offset]
						mu.Lock()
						switch {
						case r.Offset <= last:
							failure = "offset " + strconv.FormatInt(r.Offset, 10) + " after " + strconv.FormatInt(last, 10)
						case !bytes.Equal(r.Key, w.key) || !bytes.Equal(r.Value, w.value):
							failure = "offset " + strconv.FormatInt(r.Offset, 10) + " holds another record than written"
						}
						mu.Unlock()
						last = r.Offset
						n++
					})
				}
				c.Close()
				mu.Lock()
				passes++
				if n > len(want) && n < len(written) {
					across++
				}
				mu.Unlock()
			}
		}()
	}
	waitCompacted(t, "while consuming", 90*time.Second, want, func() map[int64]compactKV { return readKgo(t, s.KafkaAddrs, topic) })
	close(done)
	wg.Wait()
	if failure != "" {
		t.Fatalf("a consumer during cleaning: %s", failure)
	}
	if across == 0 {
		t.Fatalf("none of %d consumer passes read the topic partly cleaned", passes)
	}
	t.Logf("%d consumer passes over the topic, %d of them partly cleaned", passes, across)
}
