package e2e

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// compactKV is one produced record: key and value (nil: tombstone).
type compactKV struct {
	key, value []byte
}

// compactTopic creates a one-partition compacted topic that rolls segments at 1 MiB
// and after rollMs, cleans at any dirty ratio and keeps tombstones deleteMs.
func compactTopic(t *testing.T, adm *kadm.Client, prefix string, rollMs, deleteMs int) string {
	t.Helper()
	topic := topicName(prefix)
	createTopic(t, adm, topic, 1, map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.bytes":             kadm.StringPtr("1048576"),
		"segment.ms":                kadm.StringPtr(strconv.Itoa(rollMs)),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"delete.retention.ms":       kadm.StringPtr(strconv.Itoa(deleteMs)),
	})
	return topic
}

// produceVersions writes version v of keys 0..keys-1 for v in [from, to) with cl (a
// tombstone where (key+version) % 10 == 0: 10 % of the records) and records each by
// offset in written.
func produceVersions(t *testing.T, cl *kgo.Client, topic string, keys, from, to int, written map[int64]compactKV) {
	t.Helper()
	ctx := ctxT(t, 3*time.Minute)
	var recs []*kgo.Record
	for v := from; v < to; v++ {
		for k := range keys {
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%04d", k), Value: fmt.Appendf(nil, "value-%04d-%03d", k, v)}
			if (k+v)%10 == 0 {
				r.Value = nil
			}
			recs = append(recs, r)
		}
	}
	for i := 0; i < len(recs); i += 5000 {
		res := cl.ProduceSync(ctx, recs[i:min(i+5000, len(recs))]...)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		for _, pr := range res {
			written[pr.Record.Offset] = compactKV{pr.Record.Key, pr.Record.Value}
		}
	}
}

// compactedWant is what a complete clean of every offset below end keeps: the newest
// record of each key (its tombstone too unless dropTombs), and everything from end on.
func compactedWant(written map[int64]compactKV, end int64, dropTombs bool) map[int64]compactKV {
	newest := map[string]int64{}
	for off, kv := range written {
		if o, ok := newest[string(kv.key)]; off < end && (!ok || off > o) {
			newest[string(kv.key)] = off
		}
	}
	out := map[int64]compactKV{}
	for off, kv := range written {
		if off >= end || newest[string(kv.key)] == off && !(dropTombs && kv.value == nil) {
			out[off] = kv
		}
	}
	return out
}

// diffCompacted compares records read (by offset) with want; "" when equal.
func diffCompacted(got, want map[int64]compactKV) string {
	var b strings.Builder
	n := 0
	for off, w := range want {
		g, ok := got[off]
		if !ok || !bytes.Equal(g.key, w.key) || !bytes.Equal(g.value, w.value) || (g.value == nil) != (w.value == nil) {
			if n < 5 {
				fmt.Fprintf(&b, "offset %d: got %q=%q (present %v), want %q=%q; ", off, g.key, g.value, ok, w.key, w.value)
			}
			n++
		}
	}
	for off, g := range got {
		if _, ok := want[off]; !ok {
			if n < 10 {
				fmt.Fprintf(&b, "offset %d: %q=%q should be gone; ", off, g.key, g.value)
			}
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d differences (%d records read, %d wanted): %s", n, len(got), len(want), b.String())
}

// readKgo reads the whole topic with kgo; a record read twice or an offset going back
// fails the test.
func readKgo(t *testing.T, addrs []string, topic string) map[int64]compactKV {
	t.Helper()
	out := map[int64]compactKV{}
	last := int64(-1)
	for _, r := range consumeAll(t, addrs, topic) {
		if r.Offset <= last {
			t.Fatalf("kgo read offset %d after %d", r.Offset, last)
		}
		last = r.Offset
		out[r.Offset] = compactKV{r.Key, r.Value}
	}
	return out
}

// readNative reads the partition's channel with storage-core's Read.
func readNative(t *testing.T, addr, topic string) map[int64]compactKV {
	t.Helper()
	st := storageClient(t, addr)
	out := map[int64]compactKV{}
	seq := int64(0)
	for {
		resp, err := st.Read(ctxT(t, 20*time.Second), &storagev1.ReadRequest{Channel: channel.KafkaPartition(topic, 0), FromSequence: seq, MaxRecords: 10000, MaxBytes: 8 << 20})
		if err != nil {
			t.Fatalf("Read from %d: %v", seq, err)
		}
		for _, r := range resp.Records {
			if r.Sequence < seq {
				t.Fatalf("native Read: sequence %d after asking from %d", r.Sequence, seq)
			}
			out[r.Sequence-1] = compactKV{r.Key, r.Value}
			seq = r.Sequence + 1
		}
		if len(resp.Records) == 0 || seq >= resp.HighWatermark {
			return out
		}
	}
}

var kcatLineRe = regexp.MustCompile(`^(\d+) (\S*) (NULL|\S*)$`)

// readKcat reads the partition with kcat (librdkafka); -Z prints NULL for a null value.
func readKcat(t *testing.T, kcat, addr, topic string) map[int64]compactKV {
	t.Helper()
	out := map[int64]compactKV{}
	raw := runKcat(t, kcat, "-C", "-b", addr, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z", "-q", "-f", "%o %k %s\n")
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		m := kcatLineRe.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("kcat line %q", line)
		}
		off, _ := strconv.ParseInt(m[1], 10, 64)
		if _, dup := out[off]; dup {
			t.Fatalf("kcat printed offset %d twice", off)
		}
		kv := compactKV{key: []byte(m[2])}
		if m[3] != "NULL" {
			kv.value = []byte(m[3])
		}
		out[off] = kv
	}
	return out
}

// waitCompacted polls read until it returns want or the deadline passes.
func waitCompacted(t *testing.T, what string, d time.Duration, want map[int64]compactKV, read func() map[int64]compactKV) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		diff := diffCompacted(read(), want)
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not compacted after %v: %s", what, d, diff)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestCompaction: a compacted topic written with 1,000 keys x 200 versions, 10 % of
// them tombstones, by an idempotent kgo producer. Once its segments are closed the
// cleaner leaves exactly the newest record of each key at its original offset
// (tombstones included) — read with kgo; once delete.retention.ms has passed, the
// tombstones are gone too — read with kgo, kcat and storage-core's native Read. The log
// start does not move.
func TestCompaction(t *testing.T) {
	kcat := testenv.RequireBinary(t, "kcat")
	s := stack.StartT(t, stack.Options{StorageFlags: []string{"--cleaner-backoff=200ms"}})
	adm := newAdmin(t, s.KafkaAddrs)
	const deleteMs = 20_000
	topic := compactTopic(t, adm, "compact", 1000, deleteMs)
	cl := newClient(t, s.KafkaAddrs, kgo.ProducerLinger(5*time.Millisecond))
	written := map[int64]compactKV{}
	start := time.Now()
	produceVersions(t, cl, topic, 1000, 0, 200, written)
	t.Logf("produced %d records in %v", len(written), time.Since(start))
	// A record after segment.ms rolls the last segment of the workload, which the
	// cleaner may then take (it never touches the active one).
	time.Sleep(1100 * time.Millisecond)
	sentinel := &kgo.Record{Topic: topic, Key: []byte("sentinel"), Value: []byte("end")}
	if err := cl.ProduceSync(ctxT(t, 20*time.Second), sentinel).FirstErr(); err != nil {
		t.Fatal(err)
	}
	written[sentinel.Offset] = compactKV{sentinel.Key, sentinel.Value}
	end := sentinel.Offset

	waitCompacted(t, "kgo, tombstones kept", 60*time.Second, compactedWant(written, end, false), func() map[int64]compactKV { return readKgo(t, s.KafkaAddrs, topic) })
	if time.Since(start) > deleteMs*time.Millisecond {
		t.Fatalf("the first clean took longer than delete.retention.ms; the test cannot tell tombstones were kept")
	}
	want := compactedWant(written, end, true)
	if len(want) != 901 {
		t.Fatalf("want %d records, the workload should leave 900 live keys and the sentinel", len(want))
	}
	waitCompacted(t, "kgo, tombstones removed", 60*time.Second, want, func() map[int64]compactKV { return readKgo(t, s.KafkaAddrs, topic) })
	if diff := diffCompacted(readKcat(t, kcat, s.KafkaAddrs[0], topic), want); diff != "" {
		t.Fatalf("kcat: %s", diff)
	}
	if diff := diffCompacted(readNative(t, s.StorageAddr, topic), want); diff != "" {
		t.Fatalf("native Read: %s", diff)
	}
	so, err := adm.ListStartOffsets(ctxT(t, 20*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := so.Lookup(topic, 0); o.Offset != 0 {
		t.Fatalf("log start offset %d after cleaning, want 0", o.Offset)
	}
	m := scrape(t, s.Storage.HTTPAddr)
	for _, name := range []string{"tributary_storage_cleaner_removed_bytes_total", "tributary_storage_cleaner_dirty_ratio{channel=", "tributary_storage_cleaner_last_clean_timestamp_seconds{channel="} {
		if !strings.Contains(m, name) {
			t.Errorf("storage-core /metrics lacks %s", name)
		}
	}
}
