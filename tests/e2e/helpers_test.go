package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/testenv"
)

// topicName returns a fresh topic name for a test: "<prefix>-<random>".
func topicName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// newClient returns a kgo client seeded with addrs, closed when the test ends.
func newClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newAdmin returns a kadm client over its own kgo client seeded with addrs.
func newAdmin(t testing.TB, addrs []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, addrs))
}

// ctxT returns a context cancelled after d or when the test ends.
func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// createTopic creates a topic through Kafka CreateTopics and fails the test on error.
func createTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	resp, err := adm.CreateTopic(ctxT(t, 30*time.Second), partitions, -1, configs, topic)
	if err != nil {
		t.Fatalf("CreateTopics %s (%d partitions): %v (response %+v)", topic, partitions, err, resp)
	}
	waitTopic(t, adm, topic, partitions)
}

// waitTopic polls Metadata until topic shows partitions partitions, each with a leader.
func waitTopic(t testing.TB, adm *kadm.Client, topic string, partitions int32) kadm.TopicDetail {
	t.Helper()
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for {
		md, err := adm.Metadata(ctxT(t, 10*time.Second), topic)
		if err == nil {
			td, ok := md.Topics[topic]
			switch {
			case !ok:
				last = "topic missing from metadata"
			case td.Err != nil:
				last = td.Err.Error()
			case len(td.Partitions) != int(partitions):
				last = fmt.Sprintf("%d partitions", len(td.Partitions))
			default:
				ok := true
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ok = false
						last = fmt.Sprintf("partition %d leader %d err %v", p.Partition, p.Leader, p.Err)
					}
				}
				if ok {
					return td
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not ready with %d partitions: %s", topic, partitions, last)
		}
		time.Sleep(100 * time.Millisecond) // poll interval
	}
}

// endOffsets returns the high watermark of every partition of topic.
func endOffsets(t testing.TB, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	lo, err := adm.ListEndOffsets(ctxT(t, 20*time.Second), topic)
	if err != nil {
		t.Fatalf("ListEndOffsets %s: %v", topic, err)
	}
	out := map[int32]int64{}
	for p, o := range lo[topic] {
		if o.Err != nil {
			t.Fatalf("ListEndOffsets %s/%d: %v", topic, p, o.Err)
		}
		out[p] = o.Offset
	}
	return out
}

// consumeAll reads every partition of topic from offset 0 up to the high watermark
// it has when called (read through ListOffsets), with a fresh kgo consumer seeded with
// addrs. Records come back in per-partition offset order as kgo delivers them.
func consumeAll(t testing.TB, addrs []string, topic string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	adm := newAdmin(t, addrs)
	ends := endOffsets(t, adm, topic)
	want := int64(0)
	parts := map[int32]kgo.Offset{}
	for p, o := range ends {
		want += o
		parts[p] = kgo.NewOffset().At(0)
	}
	if want == 0 {
		return nil
	}
	cl := newClient(t, addrs, append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}, opts...)...)
	defer cl.Close()
	ctx := ctxT(t, 90*time.Second)
	var recs []*kgo.Record
	reached := map[int32]bool{}
	for p, o := range ends {
		if o == 0 {
			reached[p] = true
		}
	}
	for len(reached) < len(ends) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: got %d records of %d before deadline; partitions done: %v; ends %v", topic, len(recs), want, reached, ends)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Errorf("consume %s/%d: fetch error: %v", tp, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < ends[r.Partition] {
				recs = append(recs, r)
			}
			if r.Offset+1 >= ends[r.Partition] {
				reached[r.Partition] = true
			}
		})
		if t.Failed() {
			t.FailNow()
		}
	}
	return recs
}

// checkDense fails unless, per partition, recs have offsets 0..n-1 in order without
// gaps or repeats. It returns the records by partition.
func checkDense(t testing.TB, recs []*kgo.Record) map[int32][]*kgo.Record {
	t.Helper()
	byPart := map[int32][]*kgo.Record{}
	for _, r := range recs {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	for p, rs := range byPart {
		for i, r := range rs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d, want %d (offsets must be dense from 0)", p, i, r.Offset, i)
			}
		}
	}
	return byPart
}

// multisetDiff compares two string multisets and describes the first differences.
func multisetDiff(got, want []string) string {
	count := map[string]int{}
	for _, s := range want {
		count[s]++
	}
	for _, s := range got {
		count[s]--
	}
	var missing, extra []string
	for s, c := range count {
		for ; c > 0; c-- {
			missing = append(missing, s)
		}
		for ; c < 0; c++ {
			extra = append(extra, s)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("got %d, want %d; %d missing (first: %s); %d extra (first: %s)",
		len(got), len(want), len(missing), first(missing, 5), len(extra), first(extra, 5))
}

func first(s []string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.Join(s, " | ")
}

// recordKey identifies a consumed record for comparisons.
type recordKey struct {
	Partition int32
	Offset    int64
	Key       string
	Value     string
}

func snapshot(recs []*kgo.Record) []recordKey {
	out := make([]recordKey, 0, len(recs))
	for _, r := range recs {
		out = append(out, recordKey{r.Partition, r.Offset, string(r.Key), string(r.Value)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out
}

// produceKeyed synchronously produces n records "<prefix>-k<i>" / "<prefix>-v<i>" to
// topic and returns them with the partitions and offsets the client saw.
func produceKeyed(t testing.TB, cl *kgo.Client, topic, prefix string, n int) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "%s-k%d", prefix, i), Value: fmt.Appendf(nil, "%s-v%d", prefix, i)}
	}
	if err := cl.ProduceSync(ctxT(t, 60*time.Second), recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records to %s: %v", n, topic, err)
	}
	return recs
}

// nodeScript prepares a Node.js script for a test: it copies script (a path under
// tests/e2e) into a temp dir and npm-installs pkg (name@version) there. It returns the
// node binary and the dir to run the script in. Missing node or npm, or an npm install
// that fails (no registry), skip the test outside CI and fail it in CI.
func nodeScript(ctx context.Context, t *testing.T, script, pkg string) (node, dir string) {
	t.Helper()
	node = testenv.RequireBinary(t, "node")
	npm := testenv.RequireBinary(t, "npm")
	dir = t.TempDir()
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(script)), src, 0o644); err != nil {
		t.Fatal(err)
	}
	install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--silent", pkg)
	install.Dir = dir
	if out, err := install.CombinedOutput(); err != nil {
		if testenv.InCI() {
			t.Fatalf("npm install %s: %v\n%s", pkg, err, out)
		}
		t.Skipf("SKIPPING: npm install %s failed (no registry access?): %v\n%s", pkg, err, out)
	}
	return node, dir
}
