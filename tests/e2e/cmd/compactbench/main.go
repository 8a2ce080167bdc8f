// Command compactbench measures storage-core's log cleaner: a one-partition topic is
// written through the Kafka gateway with -keys keys, 1 KiB values, up to -mb MiB, under
// cleanup.policy=delete (so nothing is cleaned while it is written); then the topic is
// switched to compact and the time of the cleaner's pass over the closed segments is
// taken from storage-core's metrics (the first read byte to the channel's last-clean
// timestamp, polled every 5 ms). Beside it, in the same run and on the same disk (the
// stack's data directory), `dd if=/dev/zero of=FILE bs=1M count=N conv=fsync` writes as
// many MiB as the cleaned segments hold, before and after the clean. It prints MiB/s
// of log cleaned, the cleaner's own I/O rate, storage-core's CPU for the pass, dd's
// MiB/s and the ratio.
//
// Run from tests/e2e: go run ./cmd/compactbench [-mb 256] [-keys 10000]
// It needs the test Postgres and NATS (TRIBUTARY_TEST_POSTGRES_URL,
// TRIBUTARY_TEST_NATS_URL); TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

const mib = 1 << 20

func main() {
	mb := flag.Int("mb", 256, "MiB of records to write (1 KiB values)")
	keys := flag.Int("keys", 10000, "distinct keys (the rest of the records supersede them)")
	flag.Parse()
	if *mb < 32 || *keys < 1 {
		fmt.Fprintln(os.Stderr, "compactbench: -mb must be at least 32 and -keys at least 1")
		os.Exit(2)
	}
	if err := run(*mb, *keys); err != nil {
		fmt.Fprintln(os.Stderr, "compactbench:", err)
		os.Exit(1)
	}
}

func run(mb, keys int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := testenv.Check(ctx); err != nil {
		return err
	}
	defer stack.RemoveBinaries()
	fmt.Println("starting tributary...")
	s, err := stack.Start(ctx, stack.Options{LogLevel: "warn", StorageFlags: []string{"--cleaner-backoff=50ms"}})
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close stack:", err)
		}
	}()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.KafkaAddrs...), kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	topic := fmt.Sprintf("compactbench-%x", suffix)
	res, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{
		"cleanup.policy": kadm.StringPtr("delete"),
		"segment.bytes":  kadm.StringPtr(strconv.Itoa(16 * mib)),
	}, topic)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}

	records := mb * mib / 1024
	value := make([]byte, 1000)
	_, _ = rand.Read(value)
	fmt.Printf("writing %d records (%d keys, 1000 B values) ...\n", records, keys)
	start := time.Now()
	const chunk = 10000
	for i := 0; i < records; i += chunk {
		var batch []*kgo.Record
		for j := i; j < min(i+chunk, records); j++ {
			batch = append(batch, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%07d", j%keys), Value: value})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	fmt.Printf("  written in %v\n", time.Since(start).Round(time.Millisecond))

	closed, err := closedSegmentBytes(s.DataDir, topic)
	if err != nil {
		return err
	}
	closedMiB := max(int((closed+mib-1)/mib), 1)
	ddBefore, err := ddFsync(ctx, s.DataDir, closedMiB)
	if err != nil {
		return err
	}

	m0, err := scrape(s.Storage.HTTPAddr, topic)
	if err != nil {
		return err
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, topic); err != nil {
		return fmt.Errorf("alter cleanup.policy: %w", err)
	}
	var t0, t1 time.Time
	var cpu0 time.Duration
	var m1 metrics
	deadline := time.Now().Add(10 * time.Minute)
	for t1.IsZero() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no cleaner pass within 10 minutes")
		}
		m, err := scrape(s.Storage.HTTPAddr, topic)
		if err != nil {
			return err
		}
		now := time.Now()
		if t0.IsZero() && m.read > m0.read {
			t0, cpu0 = now, stack.CPUTime(s.Storage.Pid())
		}
		if m.lastClean > m0.lastClean {
			t1, m1 = now, m
		}
		time.Sleep(5 * time.Millisecond)
	}
	cpu := stack.CPUTime(s.Storage.Pid()) - cpu0
	took := t1.Sub(t0)
	after, err := logBytes(s.DataDir, topic)
	if err != nil {
		return err
	}
	ddAfter, err := ddFsync(ctx, s.DataDir, closedMiB)
	if err != nil {
		return err
	}

	rate := float64(closed) / mib / took.Seconds()
	cleanerIO := (m1.read - m0.read + m1.written - m0.written) / mib
	dd := (ddBefore + ddAfter) / 2
	fmt.Printf("\ncompaction benchmark: one partition, %d MiB written (%d keys x ~%d versions, 1 KiB records), 16 MiB segments;\n", mb, keys, records/keys)
	fmt.Println("storage-core's log cleaner: 1 thread, no I/O limit, fsync of every swapped segment; dd on the same disk in the same run")
	fmt.Printf("  cleaner  %8.1f MiB of closed segments cleaned in %v = %7.1f MiB/s of log (log now %.1f MiB)\n", float64(closed)/mib, took.Round(time.Millisecond), rate, float64(after)/mib)
	fmt.Printf("           cleaner I/O %.1f MiB read + written = %.1f MiB/s; storage-core CPU %v (%.1f ms per MiB cleaned)\n",
		cleanerIO, cleanerIO/took.Seconds(), cpu.Round(time.Millisecond), float64(cpu.Milliseconds())/(float64(closed)/mib))
	fmt.Printf("  dd       bs=1M count=%d conv=fsync: %.1f MiB/s before, %.1f MiB/s after (mean %.1f)\n", closedMiB, ddBefore, ddAfter, dd)
	fmt.Printf("  ours beside dd: %.2fx (MiB/s of log cleaned / dd MiB/s)\n", rate/dd)
	return nil
}

// ddFsync writes n MiB of zeros with dd conv=fsync into dir and returns MiB/s.
func ddFsync(ctx context.Context, dir string, n int) (float64, error) {
	f := filepath.Join(dir, "compactbench-dd")
	defer os.Remove(f)
	start := time.Now()
	out, err := exec.CommandContext(ctx, "dd", "if=/dev/zero", "of="+f, "bs=1M", "count="+strconv.Itoa(n), "conv=fsync").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("dd: %v: %s", err, out)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// segments returns the sizes of the topic's segment files, by base offset.
func segments(dataDir, topic string) ([]int64, error) {
	type seg struct {
		name string
		size int64
	}
	var segs []seg
	err := filepath.Walk(dataDir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return nil // files removed meanwhile
		}
		if !info.IsDir() && strings.HasSuffix(p, ".log") && strings.Contains(p, topic) {
			segs = append(segs, seg{filepath.Base(p), info.Size()})
		}
		return nil
	})
	sort.Slice(segs, func(i, j int) bool { return segs[i].name < segs[j].name })
	out := make([]int64, len(segs))
	for i, s := range segs {
		out[i] = s.size
	}
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("no segment of %s under %s", topic, dataDir)
	}
	return out, err
}

// closedSegmentBytes sums the topic's segments but the active (last) one.
func closedSegmentBytes(dataDir, topic string) (int64, error) {
	segs, err := segments(dataDir, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range segs[:len(segs)-1] {
		n += s
	}
	if n == 0 {
		return 0, fmt.Errorf("no closed segment: write more than 16 MiB")
	}
	return n, nil
}

func logBytes(dataDir, topic string) (int64, error) {
	segs, err := segments(dataDir, topic)
	var n int64
	for _, s := range segs {
		n += s
	}
	return n, err
}

type metrics struct {
	read, written, lastClean float64
}

var (
	readRe    = regexp.MustCompile(`(?m)^tributary_storage_cleaner_read_bytes_total (\S+)$`)
	writtenRe = regexp.MustCompile(`(?m)^tributary_storage_cleaner_written_bytes_total (\S+)$`)
)

// scrape reads the cleaner metrics of storage-core (the topic's last-clean time: 0
// before its first pass).
func scrape(addr, topic string) (metrics, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return metrics{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return metrics{}, err
	}
	var m metrics
	get := func(re *regexp.Regexp) float64 {
		if g := re.FindSubmatch(b); g != nil {
			v, _ := strconv.ParseFloat(string(g[1]), 64)
			return v
		}
		return 0
	}
	m.read, m.written = get(readRe), get(writtenRe)
	last := regexp.MustCompile(`(?m)^tributary_storage_cleaner_last_clean_timestamp_seconds\{channel="[^"]*` + regexp.QuoteMeta(topic) + `[^"]*"\} (\S+)$`)
	m.lastClean = get(last)
	return m, nil
}
