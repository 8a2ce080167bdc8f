package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/tests/e2e/testenv"
)

// kcatLine is one record as printed by kcat -f '%p %o %k:%s\n'.
type kcatLine struct {
	partition int32
	offset    int64
	line      string // "key:value", as in the produced file
}

// writeLines writes n lines "k<i>:<payload>" to a file and returns its path and lines.
func writeLines(t *testing.T, n int, payload func(i int) string) (string, []string) {
	t.Helper()
	lines := make([]string, n)
	var b strings.Builder
	for i := range lines {
		lines[i] = fmt.Sprintf("k%05d:%s", i, payload(i))
		b.WriteString(lines[i])
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "lines.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, lines
}

// runKcat runs kcat with args and returns stdout; stderr is included in failures.
func runKcat(t *testing.T, kcat string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v (ctx %v; %d bytes of stdout)\nstderr:\n%s", strings.Join(args, " "), err, ctx.Err(), stdout.Len(), tailString(stderr.String(), 3000))
	}
	// librdkafka logs errors at syslog level 3 ("%3|...").
	if s := stderr.String(); strings.Contains(s, "ERROR") || strings.Contains(s, "Delivery failed") || strings.Contains(s, "%3|") {
		t.Errorf("kcat %s reported errors:\n%s", strings.Join(args, " "), tailString(s, 3000))
	}
	return stdout.Bytes()
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// kcatProduce sends the file's lines, split into key and value at the first ':'.
func kcatProduce(t *testing.T, kcat, addr, topic, file string, extra ...string) {
	t.Helper()
	args := append([]string{"-P", "-b", addr, "-t", topic, "-K", ":", "-X", "acks=all"}, extra...)
	runKcat(t, kcat, append(args, "-l", file)...)
}

// kcatConsume reads the whole topic from the beginning with -e (exit at the end of
// every partition). Once want lines are in, kcat gets 10 s to notice the end and exit;
// if it does not, that is reported (t.Errorf) and kcat is killed, so the lines read
// can still be checked.
func kcatConsume(t *testing.T, kcat, addr, topic string, want int) []kcatLine {
	t.Helper()
	args := []string{"-C", "-u", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-f", "%p %o %k:%s\n"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("kcat: %v", err)
	}
	var res []kcatLine
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	exited := make(chan error, 1)
	var timer *time.Timer
	for sc.Scan() {
		l := sc.Text()
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			t.Fatalf("kcat printed an unexpected line %q", l)
		}
		p, err1 := strconv.ParseInt(f[0], 10, 32)
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("kcat printed an unexpected line %q", l)
		}
		res = append(res, kcatLine{int32(p), o, f[2]})
		if len(res) == want {
			timer = time.AfterFunc(10*time.Second, cancel)
		}
	}
	go func() { exited <- cmd.Wait() }()
	err = <-exited
	if timer != nil {
		timer.Stop()
	}
	switch {
	case err != nil && len(res) >= want:
		t.Errorf("kcat -C -e read all %d lines but did not exit at the end of the topic within 10 s (%v); stderr:\n%s", len(res), err, tailString(stderr.String(), 2000))
	case err != nil:
		t.Fatalf("kcat %s: %v after %d of %d lines; stderr:\n%s", strings.Join(args, " "), err, len(res), want, tailString(stderr.String(), 3000))
	case strings.Contains(stderr.String(), "%3|"):
		t.Errorf("kcat -C logged errors:\n%s", tailString(stderr.String(), 2000))
	}
	return res
}

// checkKcatOffsets fails unless each partition's offsets are exactly 0..n-1 and
// returns the per-partition counts.
func checkKcatOffsets(t *testing.T, got []kcatLine) map[int32]int {
	t.Helper()
	offs := map[int32][]int64{}
	for _, l := range got {
		offs[l.partition] = append(offs[l.partition], l.offset)
	}
	counts := map[int32]int{}
	for p, os := range offs {
		sort.Slice(os, func(i, j int) bool { return os[i] < os[j] })
		for i, o := range os {
			if o != int64(i) {
				t.Fatalf("partition %d: offsets not 0..n-1 without gaps: position %d has offset %d (of %d)", p, i, o, len(os))
			}
		}
		counts[p] = len(os)
	}
	return counts
}

// TestKcatRoundTrip: kcat (librdkafka) produces a 10,000-line file to a 3-partition
// topic; kcat and a kgo consumer read back exactly those lines, offsets 0..n-1 per
// partition with no gaps.
func TestKcatRoundTrip(t *testing.T) {
	kcat := testenv.RequireBinary(t, "kcat")
	s := sharedStack(t)
	addr := s.KafkaAddrs[0]
	topic := topicName("kcat")
	createTopic(t, newAdmin(t, s.KafkaAddrs), topic, 3, nil)

	file, lines := writeLines(t, 10000, func(i int) string { return fmt.Sprintf("line %05d of the kcat e2e file: %x", i, i*7919) })
	kcatProduce(t, kcat, addr, topic, file)

	got := kcatConsume(t, kcat, addr, topic, len(lines))
	gotLines := make([]string, len(got))
	for i, l := range got {
		gotLines[i] = l.line
	}
	if d := multisetDiff(gotLines, lines); d != "" {
		t.Fatalf("kcat read back different lines: %s", d)
	}
	counts := checkKcatOffsets(t, got)
	if len(counts) != 3 {
		t.Errorf("records landed on %d partitions (%v), want all 3", len(counts), counts)
	}
	t.Logf("per-partition counts: %v", counts)

	// The same lines through franz-go.
	recs := consumeAll(t, s.KafkaAddrs, topic)
	checkDense(t, recs)
	kgoLines := make([]string, len(recs))
	for i, r := range recs {
		kgoLines[i] = string(r.Key) + ":" + string(r.Value)
	}
	if d := multisetDiff(kgoLines, lines); d != "" {
		t.Fatalf("kgo read back different lines: %s", d)
	}
	// kcat and kgo agree on where each record is.
	where := map[string]kcatLine{}
	for _, l := range got {
		where[l.line] = l
	}
	for _, r := range recs {
		l := where[string(r.Key)+":"+string(r.Value)]
		if l.partition != r.Partition || l.offset != r.Offset {
			t.Fatalf("record %q: kcat saw %d/%d, kgo saw %d/%d", r.Key, l.partition, l.offset, r.Partition, r.Offset)
		}
	}
}

// TestKcatCompression: kcat produces with every compression codec; kcat and kgo read
// the lines back, and a raw Fetch shows the batches were stored with the producer's
// codec (storage keeps batches as sent).
func TestKcatCompression(t *testing.T) {
	kcat := testenv.RequireBinary(t, "kcat")
	s := sharedStack(t)
	addr := s.KafkaAddrs[0]
	adm := newAdmin(t, s.KafkaAddrs)
	codecs := []struct {
		name  string
		id    int16 // RecordBatch attributes & 0x07
		extra []string
	}{
		{"gzip", 1, []string{"-z", "gzip"}},
		{"snappy", 2, []string{"-z", "snappy"}},
		{"lz4", 3, []string{"-z", "lz4"}},
		{"zstd", 4, []string{"-z", "zstd"}},
		// librdkafka's idempotent producer (InitProducerId, sequence numbers).
		{"zstd-idempotent", 4, []string{"-z", "zstd", "-X", "enable.idempotence=true"}},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			topic := topicName("kcat-" + c.name)
			createTopic(t, adm, topic, 1, nil)
			// Repetitive payloads so that compression pays and librdkafka keeps it.
			file, lines := writeLines(t, 2000, func(i int) string {
				return fmt.Sprintf("%05d %s", i, strings.Repeat(c.name+" compressible payload ", 8))
			})
			kcatProduce(t, kcat, addr, topic, file, append(c.extra, "-X", "linger.ms=20")...)

			got := kcatConsume(t, kcat, addr, topic, len(lines))
			gotLines := make([]string, len(got))
			for i, l := range got {
				gotLines[i] = l.line
			}
			if d := multisetDiff(gotLines, lines); d != "" {
				t.Fatalf("kcat read back different lines: %s", d)
			}
			checkKcatOffsets(t, got)

			recs := consumeAll(t, s.KafkaAddrs, topic)
			checkDense(t, recs)
			kgoLines := make([]string, len(recs))
			for i, r := range recs {
				kgoLines[i] = string(r.Key) + ":" + string(r.Value)
			}
			if d := multisetDiff(kgoLines, lines); d != "" {
				t.Fatalf("kgo read back different lines: %s", d)
			}

			codecsSeen := fetchBatchCodecs(t, s.KafkaAddrs, topic, 0)
			if len(codecsSeen) == 0 {
				t.Fatalf("raw fetch returned no batches")
			}
			for _, got := range codecsSeen {
				if got != c.id {
					t.Fatalf("stored batch codec = %d, want %d (%s); codecs of first batches: %v", got, c.id, c.name, codecsSeen)
				}
			}
		})
	}
}

// fetchBatchCodecs issues one raw Fetch from offset 0 of topic/partition and returns
// the compression codec (attributes & 7) of each RecordBatch in the answer.
func fetchBatchCodecs(t *testing.T, addrs []string, topic string, partition int32) []int16 {
	t.Helper()
	adm := newAdmin(t, addrs)
	td := waitTopic(t, adm, topic, 1)
	cl := newClient(t, addrs)
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 500
	req.MinBytes = 1
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = td.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = partition
	rp.FetchOffset = 0
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t, 20*time.Second), cl.Broker(int(td.Partitions[partition].Leader)))
	if err != nil {
		t.Fatalf("raw fetch: %v", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("raw fetch: unexpected response shape %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("raw fetch: error code %d", p.ErrorCode)
	}
	var codecs []int16
	raw := p.RecordBatches
	for len(raw) >= 61 {
		var b kmsg.RecordBatch
		if err := b.ReadFrom(raw); err != nil {
			break // a partial batch at the end of the answer is allowed
		}
		codecs = append(codecs, b.Attributes&0x07)
		raw = raw[12+int(b.Length):]
	}
	return codecs
}
