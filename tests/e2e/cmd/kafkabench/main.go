// Command kafkabench measures Kafka produce and consume throughput (1 KiB records,
// acks=all, idempotent kgo producer; 1 and 6 partitions) and produce latency at a fixed
// rate against a Tributary stack started from the real binaries (storage-core with
// fsync on) and against franz-go's in-memory kfake, side by side in one run, and
// prints both figures and the ratio. A transactional case (-txn) runs kgo
// transactional producers (transactions of -txn-records records spread over 6
// partitions, each committed), once per count in -txn-producers (the same load on both
// targets; the first count is the bar's), and prints committed records/s and the commit
// latency (EndTransaction after Flush) p50/p99 of both targets. With -sasl-ssl (on by
// default) the throughput cases also run over the same stack's SASL_SSL listener (TLS
// 1.3 with a throwaway CA, SCRAM-SHA-512), in the same rounds as PLAINTEXT, and the
// SASL_SSL / PLAINTEXT ratio is printed beside the bar (>= 0.70x, issue 19). A
// share-group case (-share-records) pre-produces that many records to 6 partitions
// and has 3 kgo share consumers of one share group (KIP-932) accept each, until every
// record is accepted and committed (checked: each share partition's start offset at
// its high watermark, and nothing redelivered to a later consumer); it prints
// accepted records/s and MiB/s of both targets, the ratio (the bar: >= 1x, issue 17)
// and the duplicate deliveries.
//
// Run from tests/e2e: go run ./cmd/kafkabench [-duration 5s] [-rate 20000]
// It needs the test Postgres and NATS (TRIBUTARY_TEST_POSTGRES_URL,
// TRIBUTARY_TEST_NATS_URL); TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

type config struct {
	duration    time.Duration
	latencyDur  time.Duration
	rate        int
	recordBytes int
	fsync       string
	targets     string
	maxRecords  int
	rounds      int
	partitions  string
	txn         bool
	txnRecords  int
	txnProds    []int
	saslSSL     bool
	profileDir  string
	profileSecs int
	fanGroups   int
	fanRecords  int
	// shareRecords is the share-group case's record count (0: no share case).
	shareRecords int
	// shareStartFirst sets the share group's start offsets before the produce.
	shareStartFirst bool
}

// target is a Kafka endpoint under test.
type target struct {
	name string
	// fresh returns addresses for a new case; for kfake it starts a new in-memory
	// cluster so earlier cases' records do not weigh on later ones.
	fresh func() ([]string, func(), error)
	// opts are the client options every client of this target starts with (TLS and
	// SASL for the SASL_SSL target).
	opts []kgo.Opt
	// throughputOnly targets run the throughput cases only, not the transactional and
	// latency ones.
	throughputOnly bool
	// procs name the server processes whose CPU the throughput cases measure (this
	// process, the client, is always measured; kfake runs inside it).
	procs []proc
	// pgDB is the target's Postgres database ("": none), whose backends' CPU the
	// transactional case measures.
	pgDB string
}

// postgresCPU returns the CPU time used so far by each Postgres backend connected to
// db (by pid).
func postgresCPU(ctx context.Context, db string) (map[int]time.Duration, error) {
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1`, db)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		out[int(pid)] = stack.CPUTime(int(pid))
	}
	return out, nil
}

// postgresCPUSince sums the CPU time db's backends used since before (from
// postgresCPU); a backend started since counts from 0, one ended since is missed.
func postgresCPUSince(ctx context.Context, db string, before map[int]time.Duration) (time.Duration, error) {
	now, err := postgresCPU(ctx, db)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for pid, d := range now {
		sum += d - before[pid]
	}
	return sum, nil
}

// proc is a process whose CPU time is measured.
type proc struct {
	name string
	pid  int
	// http is the process's --http-addr (its /debug/pprof and /metrics).
	http string
}

// cpuNow returns the CPU time used so far by this process and each of procs.
func cpuNow(procs []proc) []time.Duration {
	out := []time.Duration{stack.CPUTime(os.Getpid())}
	for _, p := range procs {
		out = append(out, stack.CPUTime(p.pid))
	}
	return out
}

// cpuSince returns the CPU time used since before (from cpuNow).
func cpuSince(procs []proc, before []time.Duration) []time.Duration {
	now := cpuNow(procs)
	for i := range now {
		now[i] -= before[i]
	}
	return now
}

// client is a kgo client of tg seeded with addrs.
func (tg target) client(addrs []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(addrs...)}, tg.opts...), opts...)...)
}

type result struct {
	records  int
	elapsed  time.Duration
	p50, p99 time.Duration
	p999     time.Duration
	max      time.Duration
	// produce50 is, in the transactional case, the median time from BeginTransaction
	// to the flushed records (the part of a transaction before EndTransaction).
	produce50 time.Duration
	// cpu is, in the throughput cases, the CPU time used by the client process (kfake
	// included) and then each of the target's procs during the case.
	cpu []time.Duration
	// gc is, in the latency case, the garbage collection pauses of the same processes.
	gc []gcStat
	// fsync50 and fsync99 are, in the latency and transactional cases (fsync50
	// only), storage-core's fsync latency quantiles (bucket upper bounds; -1 above
	// the last) over fsyncs fsyncs.
	fsync50, fsync99 time.Duration
	fsyncs           int
}

// gcStat is the garbage collection stop-the-world pause time and number of
// collections of a process; ok is false when they could not be read.
type gcStat struct {
	pause time.Duration
	n     int64
	ok    bool
}

// gcNow returns the GC pauses so far of this process (runtime) and each of procs (their
// /metrics go_gc_duration_seconds sum and count).
func gcNow(procs []proc) []gcStat {
	var st debug.GCStats
	debug.ReadGCStats(&st)
	out := []gcStat{{st.PauseTotal, st.NumGC, true}}
	for _, p := range procs {
		m := scrape(p.http)
		sum, ok1 := m["go_gc_duration_seconds_sum"]
		n, ok2 := m["go_gc_duration_seconds_count"]
		out = append(out, gcStat{time.Duration(sum * float64(time.Second)), int64(n), ok1 && ok2})
	}
	return out
}

// gcSince returns the GC pauses since before (from gcNow).
func gcSince(procs []proc, before []gcStat) []gcStat {
	now := gcNow(procs)
	for i := range now {
		now[i].pause -= before[i].pause
		now[i].n -= before[i].n
		now[i].ok = now[i].ok && before[i].ok
	}
	return now
}

// scrape returns the samples of http://addr/metrics (Prometheus text format) by series
// (name and labels as written); empty when unreadable.
func scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	if addr == "" {
		return out
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		if f, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = f
		}
	}
	return out
}

// fsyncHist is storage-core's fsync latency histogram (tributary_storage_fsync_seconds):
// cumulative counts by upper bound in seconds.
type fsyncHist map[float64]float64

const fsyncMetric = "tributary_storage_fsync_seconds_bucket{le=\""

func fsyncNow(procs []proc) fsyncHist {
	h := fsyncHist{}
	for _, p := range procs {
		if p.name != "storage" {
			continue
		}
		for k, v := range scrape(p.http) {
			if le, ok := strings.CutPrefix(k, fsyncMetric); ok {
				if b, err := strconv.ParseFloat(strings.TrimSuffix(le, "\"}"), 64); err == nil {
					h[b] = v
				}
			}
		}
	}
	return h
}

// quantileSince returns the upper bound of the bucket holding quantile q of the fsyncs
// since before, and their number.
func (h fsyncHist) quantileSince(before fsyncHist, q float64) (time.Duration, int) {
	bounds := make([]float64, 0, len(h))
	for b := range h {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, 0
	}
	total := h[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	for _, b := range bounds {
		if total > 0 && h[b]-before[b] >= q*total {
			if math.IsInf(b, 1) {
				return -1, int(total)
			}
			return time.Duration(b * float64(time.Second)), int(total)
		}
	}
	return 0, int(total)
}

func (r result) perSec() float64 { return float64(r.records) / r.elapsed.Seconds() }

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 3*time.Second, "produce time per throughput round")
	flag.IntVar(&cfg.rounds, "rounds", 3, "throughput rounds per case and target; the median is reported")
	flag.DurationVar(&cfg.latencyDur, "latency-duration", 10*time.Second, "time per fixed-rate latency case (0: none)")
	flag.IntVar(&cfg.rate, "rate", 20000, "records/s for the latency case")
	flag.IntVar(&cfg.recordBytes, "record-bytes", 1024, "value size in bytes")
	flag.StringVar(&cfg.fsync, "fsync", "always", "storage-core --fsync")
	flag.IntVar(&cfg.maxRecords, "max-records", 2_000_000, "stop a throughput case's produce early after this many records (bounds kfake's memory)")
	flag.StringVar(&cfg.partitions, "partitions", "1,6", "partition counts of the throughput cases, comma separated (\"\": none)")
	flag.StringVar(&cfg.targets, "targets", "tributary,kfake", "targets to measure, comma separated (tributary, kfake); the ratio needs both")
	flag.BoolVar(&cfg.txn, "txn", true, "run the transactional case")
	flag.IntVar(&cfg.txnRecords, "txn-records", 100, "records per transaction in the transactional case")
	flag.BoolVar(&cfg.saslSSL, "sasl-ssl", true, "also run the throughput cases over the same stack's SASL_SSL listener (TLS 1.3, SCRAM-SHA-512) and print their ratio to PLAINTEXT (the bar: >= 0.70x)")
	flag.IntVar(&cfg.fanGroups, "fanout-groups", 4, "consumer groups of the fan-out case, reading one 6-partition topic while it is produced (0: no fan-out case)")
	flag.IntVar(&cfg.fanRecords, "fanout-records", 300_000, "records produced in the fan-out case (the same load on every target)")
	flag.IntVar(&cfg.shareRecords, "share-records", 200_000, "records of the share-group case (6 partitions, 3 share consumers accepting each; 0: no share case)")
	flag.BoolVar(&cfg.shareStartFirst, "share-start-first", false, "in the share-group case, set the group's start offsets before the produce rather than after (storage-core's share queue then copies the records from the partition log while they are produced, not during the consume)")
	flag.StringVar(&cfg.profileDir, "profile", "", "write CPU profiles of the first round of each tributary consume case, share case and transactional case into this directory (client, gateway, storage, coordinator)")
	flag.IntVar(&cfg.profileSecs, "profile-seconds", 5, "length of the gateway and storage profiles of -profile, in seconds (the client's covers the consume)")
	txnProds := flag.String("txn-producers", "16,4,64", "concurrent transactional producers (one transactional id each), comma separated: one transactional case per count, the same load on every target; the first is the bar's (see tests/e2e/README.md)")
	flag.Parse()
	for _, f := range strings.Split(*txnProds, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "kafkabench: bad -txn-producers %q\n", *txnProds)
			os.Exit(2)
		}
		cfg.txnProds = append(cfg.txnProds, n)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "kafkabench:", err)
		os.Exit(1)
	}
}

func run(cfg config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	want := map[string]bool{}
	for _, t := range strings.Split(cfg.targets, ",") {
		want[strings.TrimSpace(t)] = true
	}
	var targets []target
	if want["tributary"] {
		if err := testenv.Check(ctx); err != nil {
			return err
		}
		defer stack.RemoveBinaries()
		fmt.Printf("starting tributary (fsync=%s)...\n", cfg.fsync)
		opts := stack.Options{Fsync: cfg.fsync, LogLevel: "warn"}
		var secure []kgo.Opt
		if cfg.saslSSL {
			var cleanup func()
			var err error
			if secure, cleanup, err = saslSSL(&opts); err != nil {
				return err
			}
			defer cleanup()
		}
		s, err := stack.Start(ctx, opts)
		if err != nil {
			return err
		}
		defer func() {
			if err := s.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "close stack:", err)
			}
		}()
		procs := []proc{{"gateway", s.Gateways[0].Pid(), s.Gateways[0].HTTPAddr}, {"storage", s.Storage.Pid(), s.Storage.HTTPAddr},
			{"coord", s.Coordinator.Pid(), s.Coordinator.HTTPAddr}}
		targets = append(targets, target{name: "tributary", procs: procs, pgDB: s.Database,
			fresh: func() ([]string, func(), error) { return s.KafkaAddrs, func() {}, nil }})
		if cfg.saslSSL {
			targets = append(targets, target{name: "sasl_ssl", opts: secure, throughputOnly: true, procs: procs,
				fresh: func() ([]string, func(), error) { return s.ListenerAddrs["SASL_SSL"], func() {}, nil }})
		}
	}
	if want["kfake"] {
		targets = append(targets, target{name: "kfake", fresh: func() ([]string, func(), error) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return nil, nil, err
			}
			return c.ListenAddrs(), c.Close, nil
		}})
	}
	if len(targets) == 0 {
		return fmt.Errorf("no known target in -targets %q", cfg.targets)
	}
	// Columns are the measured targets: tributary, its SASL_SSL listener, then kfake.
	// The ratio to kfake (tributary / kfake) is printed only when both were measured,
	// the SASL_SSL ratio (SASL_SSL / PLAINTEXT on the same stack) when it was.
	trib, sasl, fake := -1, -1, -1
	var full []target // the targets of the transactional and latency cases
	for i, tg := range targets {
		switch tg.name {
		case "tributary":
			trib = i
		case "sasl_ssl":
			sasl = i
		case "kfake":
			fake = i
		}
		if !tg.throughputOnly {
			full = append(full, tg)
		}
	}
	both := trib >= 0 && fake >= 0

	type row struct {
		name string
		res  []result // per target
	}
	var rows []row
	var counts []int32
	for _, f := range strings.Split(cfg.partitions, ",") {
		if f == "" {
			continue // -partitions "": no throughput case
		}
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -partitions %q", cfg.partitions)
		}
		counts = append(counts, int32(n))
	}
	for _, parts := range counts {
		// Rounds alternate between the targets; each figure is the median round, so a
		// burst of noise on a small shared machine does not decide the ratio.
		runs := make([][2][]result, len(targets)) // [target][produce, consume][round]
		for round := 0; round < cfg.rounds; round++ {
			for i, tg := range targets {
				prof := ""
				if cfg.profileDir != "" && round == 0 && len(tg.procs) > 0 {
					prof = filepath.Join(cfg.profileDir, fmt.Sprintf("%s-consume-%dp", tg.name, parts))
				}
				p, c, err := throughput(ctx, cfg, tg, parts, prof)
				if err != nil {
					return fmt.Errorf("%s, %d partitions: %w", tg.name, parts, err)
				}
				runs[i][0] = append(runs[i][0], p)
				runs[i][1] = append(runs[i][1], c)
				fmt.Printf("  round %d %-9s %d partition(s): produce %9.0f rec/s, consume %9.0f rec/s\n", round+1, tg.name, parts, p.perSec(), c.perSec())
			}
		}
		prod := row{name: fmt.Sprintf("produce %d partition(s)", parts)}
		cons := row{name: fmt.Sprintf("consume %d partition(s)", parts)}
		for i := range runs {
			prod.res = append(prod.res, median(runs[i][0]))
			cons.res = append(cons.res, median(runs[i][1]))
		}
		rows = append(rows, prod, cons)
	}
	var fanRuns [][]fanResult // [full target][round]
	if cfg.fanGroups > 0 {
		fanRuns = make([][]fanResult, len(full))
		for round := 0; round < cfg.rounds; round++ {
			for i, tg := range full {
				r, err := fanout(ctx, cfg, tg)
				if err != nil {
					return fmt.Errorf("%s fan-out: %w", tg.name, err)
				}
				fanRuns[i] = append(fanRuns[i], r)
				fmt.Printf("  round %d %-9s fan-out, %d groups: %9.0f rec/s in total, produce %9.0f rec/s\n", round+1, tg.name, cfg.fanGroups, r.total.perSec(), r.produce.perSec())
			}
		}
	}
	var shareRuns [][]shareResult // [full target][round]
	if cfg.shareRecords > 0 {
		shareRuns = make([][]shareResult, len(full))
		for round := 0; round < cfg.rounds; round++ {
			for i, tg := range full {
				r, err := share(ctx, cfg, tg, shareProfile(cfg, tg, round))
				if err != nil {
					return fmt.Errorf("%s share group: %w", tg.name, err)
				}
				shareRuns[i] = append(shareRuns[i], r)
				fmt.Printf("  round %d %-9s share group, %d consumers: %9.0f accepted rec/s (first record after %v), %d duplicate deliveries, %d redelivered\n",
					round+1, tg.name, shareConsumers, r.consume.perSec(), r.joined.Round(time.Millisecond), r.dups, r.redelivered)
			}
		}
	}
	var txnRuns [][][]result // [producer count][full target][round]
	if cfg.txn {
		for _, prods := range cfg.txnProds {
			runs := make([][]result, len(full))
			for round := 0; round < cfg.rounds; round++ {
				for i, tg := range full {
					prof := ""
					if cfg.profileDir != "" && round == 0 && len(tg.procs) > 0 {
						prof = filepath.Join(cfg.profileDir, fmt.Sprintf("%s-txn-%d", tg.name, prods))
					}
					r, err := transactional(ctx, cfg, tg, prods, prof)
					if err != nil {
						return fmt.Errorf("%s transactional, %d producers: %w", tg.name, prods, err)
					}
					runs[i] = append(runs[i], r)
					fmt.Printf("  round %d %-9s transactional, %d producers: %9.0f committed rec/s, commit p50 %v p99 %v (begin to flushed p50 %v)\n",
						round+1, tg.name, prods, r.perSec(), r.p50, r.p99, r.produce50)
				}
			}
			txnRuns = append(txnRuns, runs)
		}
	}
	lat := make([]result, len(full))
	for i, tg := range full {
		if cfg.latencyDur <= 0 {
			break
		}
		r, err := latency(ctx, cfg, tg)
		if err != nil {
			return fmt.Errorf("%s latency: %w", tg.name, err)
		}
		lat[i] = r
		fmt.Printf("  %-9s latency at %d rec/s: p50 %v p99 %v\n", tg.name, cfg.rate, r.p50, r.p99)
	}

	mib := float64(cfg.recordBytes) / (1 << 20)
	fmt.Printf("\nKafka benchmark: %d B random records, uncompressed, acks=all, idempotent kgo producer; tributary fsync=%s; kfake in memory\n", cfg.recordBytes, cfg.fsync)
	if sasl >= 0 {
		fmt.Println("sasl_ssl: the tributary stack's SASL_SSL listener (TLS 1.3, SCRAM-SHA-512), beside its PLAINTEXT one in the same rounds")
	}
	header := fmt.Sprintf("%-24s", fmt.Sprintf("median of %d (records/s)", cfg.rounds))
	for _, tg := range targets {
		header += fmt.Sprintf(" %14s", tg.name)
	}
	if sasl >= 0 {
		header += fmt.Sprintf(" %9s", "ssl/plain")
	}
	if both {
		header += fmt.Sprintf(" %8s", "ratio")
	}
	fmt.Println(header)
	for _, r := range rows {
		line := fmt.Sprintf("%-24s", r.name)
		for _, x := range r.res {
			line += fmt.Sprintf(" %14.0f", x.perSec())
		}
		if sasl >= 0 {
			line += fmt.Sprintf(" %8.2fx", r.res[sasl].perSec()/r.res[trib].perSec())
		}
		if both {
			line += fmt.Sprintf(" %7.2fx   (%.1f vs %.1f MiB/s)", r.res[trib].perSec()/r.res[fake].perSec(), r.res[trib].perSec()*mib, r.res[fake].perSec()*mib)
		} else {
			line += fmt.Sprintf("   (%.1f MiB/s)", r.res[0].perSec()*mib)
		}
		fmt.Println(line)
	}
	if len(rows) > 0 {
		fmt.Println("CPU per record (µs, the median round's; client includes kfake when it is the target)")
		for _, r := range rows {
			for i, tg := range targets {
				line := fmt.Sprintf("  %-22s %-9s", r.name, tg.name)
				x := r.res[i]
				var total time.Duration
				for j, d := range x.cpu {
					name := "client"
					if j > 0 {
						name = tg.procs[j-1].name
					}
					line += fmt.Sprintf(" %s %.1f", name, perRecord(d, x.records))
					total += d
				}
				fmt.Printf("%s, total %.1f\n", line, perRecord(total, x.records))
			}
		}
	}
	if sasl >= 0 && len(rows) > 0 {
		fmt.Println("  the SASL_SSL bar: ssl/plain >= 0.70x (TLS costs at most 30 % of plaintext throughput)")
	}
	bothFull := len(full) == 2
	if len(fanRuns) > 0 {
		fan := make([]fanResult, len(fanRuns))
		for i := range fanRuns {
			fan[i] = medianFan(fanRuns[i])
		}
		line := fmt.Sprintf("%-24s", fmt.Sprintf("fan-out %d groups, total", cfg.fanGroups))
		for _, f := range fan {
			line += fmt.Sprintf(" %14.0f", f.total.perSec())
		}
		if bothFull {
			line += fmt.Sprintf(" %7.2fx   (%d records to 6 partitions, read by every group while produced; the bar: >= 1.5x)", fan[0].total.perSec()/fan[1].total.perSec(), cfg.fanRecords)
		}
		fmt.Println(line)
		for g := 0; g < cfg.fanGroups; g++ {
			line := fmt.Sprintf("%-24s", fmt.Sprintf("  group %d", g+1))
			for _, f := range fan {
				line += fmt.Sprintf(" %14.0f", f.groups[g].perSec())
			}
			fmt.Println(line)
		}
		line = fmt.Sprintf("%-24s", "  produce meanwhile")
		for _, f := range fan {
			line += fmt.Sprintf(" %14.0f", f.produce.perSec())
		}
		fmt.Println(line)
		for i, tg := range full {
			line := fmt.Sprintf("  CPU per record read    %-9s", tg.name)
			var total time.Duration
			for j, d := range fan[i].total.cpu {
				name := "client"
				if j > 0 {
					name = tg.procs[j-1].name
				}
				line += fmt.Sprintf(" %s %.1f", name, perRecord(d, fan[i].total.records))
				total += d
			}
			fmt.Printf("%s, total %.1f µs\n", line, perRecord(total, fan[i].total.records))
		}
	}
	if len(shareRuns) > 0 {
		sh := make([]shareResult, len(shareRuns))
		for i := range shareRuns {
			sh[i] = medianShare(shareRuns[i])
		}
		line := fmt.Sprintf("%-24s", "share group, accepted")
		for _, r := range sh {
			line += fmt.Sprintf(" %14.0f", r.consume.perSec())
		}
		if bothFull {
			line += fmt.Sprintf(" %7.2fx   (%.1f vs %.1f MiB/s; %d records, 6 partitions, %d share consumers accepting each; the bar: >= 1x)",
				sh[0].consume.perSec()/sh[1].consume.perSec(), sh[0].consume.perSec()*mib, sh[1].consume.perSec()*mib, sh[0].consume.records, shareConsumers)
		} else {
			line += fmt.Sprintf("   (%.1f MiB/s)", sh[0].consume.perSec()*mib)
		}
		fmt.Println(line)
		for _, q := range []struct {
			name string
			f    func(shareResult) string
		}{{"first record after", func(r shareResult) string { return r.joined.Round(time.Millisecond).String() }},
			{"duplicate deliveries", func(r shareResult) string { return strconv.FormatInt(r.dups, 10) }},
			{"delivery count > 1", func(r shareResult) string { return strconv.FormatInt(r.redelivered, 10) }}} {
			line := fmt.Sprintf("%-24s", "  "+q.name)
			for _, r := range sh {
				line += fmt.Sprintf(" %14s", q.f(r))
			}
			fmt.Println(line)
		}
		total := func(rs [][]shareResult, f func(shareResult) int64) (n int64) {
			for _, t := range rs {
				for _, r := range t {
					n += f(r)
				}
			}
			return n
		}
		fmt.Printf("  every round: each share partition's start offset at its high watermark after the acks, nothing redelivered after; duplicate deliveries over all rounds: %d\n",
			total(shareRuns, func(r shareResult) int64 { return r.dups }))
		for i, tg := range full {
			line := fmt.Sprintf("  CPU per record accepted %-9s", tg.name)
			var total time.Duration
			for j, d := range sh[i].consume.cpu {
				name := "client"
				if j > 0 {
					name = tg.procs[j-1].name
				}
				line += fmt.Sprintf(" %s %.1f", name, perRecord(d, sh[i].consume.records))
				total += d
			}
			fmt.Printf("%s, total %.1f µs (the consumers' whole run, join included)\n", line, perRecord(total, sh[i].consume.records))
		}
	}
	for k, runs := range txnRuns {
		prods := cfg.txnProds[k]
		txn := make([]result, len(runs))
		line := fmt.Sprintf("%-24s", fmt.Sprintf("txn x%d, %d producers", cfg.txnRecords, prods))
		for i := range runs {
			txn[i] = median(runs[i])
			line += fmt.Sprintf(" %14.0f", txn[i].perSec())
		}
		if bothFull {
			note := "committed records, 6 partitions"
			if k == 0 {
				note += "; the bar: >= 1x"
			}
			line += fmt.Sprintf(" %7.2fx   (%s)", txn[0].perSec()/txn[1].perSec(), note)
		}
		fmt.Println(line)
		for _, q := range []struct {
			name string
			f    func(result) time.Duration
		}{{"commit p50", func(r result) time.Duration { return r.p50 }}, {"commit p99", func(r result) time.Duration { return r.p99 }},
			{"begin..flushed p50", func(r result) time.Duration { return r.produce50 }}} {
			line := fmt.Sprintf("%-24s", "  "+q.name)
			for _, r := range txn {
				line += fmt.Sprintf(" %14v", q.f(r).Round(10*time.Microsecond))
			}
			fmt.Println(line)
		}
		// CPU per committed transaction: the client's (with kfake when it is the
		// target), then each server process's and, for our stack, its Postgres
		// backends'.
		for i, tg := range full {
			x := txn[i]
			txns := x.records / cfg.txnRecords
			if txns == 0 {
				continue
			}
			line := fmt.Sprintf("  CPU/txn (ms) %-9s", tg.name)
			var total time.Duration
			for j, d := range x.cpu {
				name := "client"
				switch {
				case j > 0 && j <= len(tg.procs):
					name = tg.procs[j-1].name
				case j > len(tg.procs):
					name = "postgres"
				}
				line += fmt.Sprintf(" %s %.2f", name, d.Seconds()*1e3/float64(txns))
				total += d
			}
			fmt.Printf("%s, total %.2f\n", line, total.Seconds()*1e3/float64(txns))
			if x.fsyncs > 0 {
				fmt.Printf("  storage fsyncs/txn %-9s %.1f (p50 <= %v)\n", tg.name, float64(x.fsyncs)/float64(txns), x.fsync50)
			}
		}
	}
	if cfg.latencyDur <= 0 {
		return nil
	}
	header = fmt.Sprintf("%-24s", fmt.Sprintf("latency @%d rec/s", cfg.rate))
	for _, tg := range full {
		header += fmt.Sprintf(" %14s", tg.name)
	}
	fmt.Println(header)
	for _, q := range []struct {
		name string
		f    func(result) time.Duration
	}{{"p50", func(r result) time.Duration { return r.p50 }}, {"p99", func(r result) time.Duration { return r.p99 }}, {"p99.9", func(r result) time.Duration { return r.p999 }}, {"max", func(r result) time.Duration { return r.max }}} {
		line := fmt.Sprintf("%-24s", "  "+q.name)
		for _, r := range lat {
			line += fmt.Sprintf(" %14v", q.f(r).Round(10*time.Microsecond))
		}
		fmt.Println(line)
	}
	line := fmt.Sprintf("%-24s", "  achieved rec/s")
	for _, r := range lat {
		line += fmt.Sprintf(" %14.0f", r.perSec())
	}
	fmt.Println(line)
	fmt.Println("GC stop-the-world pauses during the latency case (total, collections; client includes kfake when it is the target)")
	for i, tg := range full {
		line := fmt.Sprintf("  %-22s", tg.name)
		for j, g := range lat[i].gc {
			name := "client"
			if j > 0 {
				name = tg.procs[j-1].name
			}
			if !g.ok {
				line += fmt.Sprintf(" %s n/a", name)
				continue
			}
			line += fmt.Sprintf(" %s %v (%d)", name, g.pause.Round(10*time.Microsecond), g.n)
		}
		fmt.Println(line)
		if r := lat[i]; r.fsyncs > 0 {
			fmt.Printf("  %-22s storage fsyncs %d, p50 <= %v, p99 <= %v (histogram bucket bounds; -1: above the last)\n", "", r.fsyncs, r.fsync50, r.fsync99)
		}
	}
	return nil
}

// perRecord is d per record of n, in µs.
func perRecord(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(n)
}

// median returns the result with the median rate.
func median(rs []result) result {
	rs = append([]result(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].perSec() < rs[j].perSec() })
	return rs[len(rs)/2]
}

var topicSeq atomic.Int64

func newTopic(ctx context.Context, tg target, addrs []string, parts int32) (string, error) {
	name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), topicSeq.Add(1))
	cl, err := tg.client(addrs)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, parts, -1, nil, name); err != nil {
		return "", fmt.Errorf("create topic: %w", err)
	}
	// Wait until every partition has a leader.
	deadline := time.Now().Add(20 * time.Second)
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil {
			td := md.Topics[name]
			ok := td.Err == nil && len(td.Partitions) == int(parts)
			for _, p := range td.Partitions {
				ok = ok && p.Leader >= 0
			}
			if ok {
				return name, nil
			}
		}
		if time.Now().After(deadline) {
			return "", errors.New("topic not ready")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// producer is kgo with acks=all and its default idempotence; compression is off so the
// figures are bytes that really move (kgo's default, snappy, shrinks synthetic values).
func producer(tg target, addrs []string, topic string) (*kgo.Client, error) {
	return tg.client(addrs, kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(30*time.Second),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
}

// randomValue returns n random (incompressible) bytes.
func randomValue(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// throughput produces as fast as the client allows for cfg.duration, flushes, then
// consumes everything back with a fresh consumer. With profile set, CPU profiles of the
// consume are written to profile-{client,gateway,storage}.pprof.
func throughput(ctx context.Context, cfg config, tg target, parts int32, profile string) (prod, cons result, err error) {
	addrs, closeFn, err := tg.fresh()
	if err != nil {
		return prod, cons, err
	}
	defer closeFn()
	topic, err := newTopic(ctx, tg, addrs, parts)
	if err != nil {
		return prod, cons, err
	}
	cl, err := producer(tg, addrs, topic)
	if err != nil {
		return prod, cons, err
	}
	value := randomValue(cfg.recordBytes)
	var (
		acked   atomic.Int64
		firstMu sync.Mutex
		first   error
	)
	cpu0 := cpuNow(tg.procs)
	start := time.Now()
	end := start.Add(cfg.duration)
	for i := 0; i < cfg.maxRecords && time.Now().Before(end) && ctx.Err() == nil; i++ {
		cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%1024)), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstMu.Lock()
				if first == nil {
					first = err
				}
				firstMu.Unlock()
				return
			}
			acked.Add(1)
		})
	}
	if err := cl.Flush(ctx); err != nil {
		cl.Close()
		return prod, cons, err
	}
	prod = result{records: int(acked.Load()), elapsed: time.Since(start), cpu: cpuSince(tg.procs, cpu0)}
	cl.Close()
	if first != nil {
		return prod, cons, fmt.Errorf("produce: %w", first)
	}

	cc, err := tg.client(addrs, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return prod, cons, err
	}
	defer cc.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	stopProfiles := func() {}
	if profile != "" {
		if stopProfiles, err = startProfiles(profile, cfg.profileSecs, tg.procs); err != nil {
			return prod, cons, err
		}
	}
	defer stopProfiles()
	cpu0 = cpuNow(tg.procs)
	start = time.Now()
	n := 0
	for n < prod.records {
		fs := cc.PollFetches(cctx)
		if cctx.Err() != nil {
			return prod, cons, fmt.Errorf("consume: read %d of %d: %w", n, prod.records, cctx.Err())
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return prod, cons, fmt.Errorf("consume: %v", errs[0].Err)
		}
		n += fs.NumRecords()
	}
	cons = result{records: n, elapsed: time.Since(start), cpu: cpuSince(tg.procs, cpu0)}
	return prod, cons, nil
}

// fanResult is one round of the fan-out case.
type fanResult struct {
	groups  []result // records read by each group, until it had them all
	total   result   // all groups' records over the time until the last finished
	produce result
}

// medianFan returns the round with the median total rate.
func medianFan(rs []fanResult) fanResult {
	rs = append([]fanResult(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].total.perSec() < rs[j].total.perSec() })
	return rs[len(rs)/2]
}

// fanout produces cfg.fanRecords records as fast as the producer allows to a fresh
// 6-partition topic while cfg.fanGroups consumer groups (one kgo client each, from the
// start) read it; each group's rate is its records over the time from the start until
// it had read every record, the total the sum of records over the time until the last
// group finished.
func fanout(ctx context.Context, cfg config, tg target) (fanResult, error) {
	const parts = 6
	addrs, closeFn, err := tg.fresh()
	if err != nil {
		return fanResult{}, err
	}
	defer closeFn()
	topic, err := newTopic(ctx, tg, addrs, parts)
	if err != nil {
		return fanResult{}, err
	}
	want := cfg.fanRecords
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var consumers []*kgo.Client
	for g := 0; g < cfg.fanGroups; g++ {
		cc, err := tg.client(addrs, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(fmt.Sprintf("%s-group-%d", topic, g)),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		if err != nil {
			return fanResult{}, err
		}
		defer cc.Close()
		consumers = append(consumers, cc)
	}
	cl, err := producer(tg, addrs, topic)
	if err != nil {
		return fanResult{}, err
	}
	defer cl.Close()
	value := randomValue(cfg.recordBytes)
	out := fanResult{groups: make([]result, cfg.fanGroups)}
	errs := make([]error, cfg.fanGroups)
	var wg sync.WaitGroup
	cpu0 := cpuNow(tg.procs)
	start := time.Now()
	for g, cc := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for n < want {
				fs := cc.PollFetches(cctx)
				if cctx.Err() != nil {
					errs[g] = fmt.Errorf("group %d: read %d of %d: %w", g+1, n, want, cctx.Err())
					return
				}
				if e := fs.Errors(); len(e) > 0 {
					errs[g] = fmt.Errorf("group %d: %w", g+1, e[0].Err)
					return
				}
				n += fs.NumRecords()
			}
			out.groups[g] = result{records: n, elapsed: time.Since(start)}
		}()
	}
	var (
		firstMu sync.Mutex
		first   error
	)
	for i := 0; i < want && cctx.Err() == nil; i++ {
		cl.Produce(cctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", i%1024)), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				firstMu.Lock()
				if first == nil {
					first = err
				}
				firstMu.Unlock()
			}
		})
	}
	if err := cl.Flush(cctx); err != nil {
		cancel()
		wg.Wait()
		return fanResult{}, err
	}
	out.produce = result{records: want, elapsed: time.Since(start)}
	if first != nil {
		cancel()
		wg.Wait()
		return fanResult{}, fmt.Errorf("produce: %w", first)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fanResult{}, err
	}
	out.total = result{elapsed: time.Since(start), cpu: cpuSince(tg.procs, cpu0)}
	for _, g := range out.groups {
		out.total.records += g.records
	}
	return out, nil
}

// startProfiles starts a CPU profile of this process into prefix-client.pprof and
// asks each of procs for a secs-second one (/debug/pprof/profile on its HTTP address)
// into prefix-NAME.pprof. stop ends the client's and waits for the others.
func startProfiles(prefix string, secs int, procs []proc) (stop func(), err error) {
	f, err := os.Create(prefix + "-client.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stack.FetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.http, secs), prefix+"-"+p.name+".pprof"); err != nil {
				fmt.Fprintf(os.Stderr, "profile of %s: %v\n", p.name, err)
			}
		}()
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		wg.Wait()
	}, nil
}

// latency produces at a fixed cfg.rate for cfg.latencyDur to 6 partitions and reports
// percentiles of the time from Produce to the acknowledgement.
func latency(ctx context.Context, cfg config, tg target) (result, error) {
	addrs, closeFn, err := tg.fresh()
	if err != nil {
		return result{}, err
	}
	defer closeFn()
	topic, err := newTopic(ctx, tg, addrs, 6)
	if err != nil {
		return result{}, err
	}
	cl, err := producer(tg, addrs, topic)
	if err != nil {
		return result{}, err
	}
	defer cl.Close()
	value := randomValue(cfg.recordBytes)
	var (
		mu    sync.Mutex
		lats  []time.Duration
		first error
	)
	gc0, fs0 := gcNow(tg.procs), fsyncNow(tg.procs)
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for ctx.Err() == nil {
		now := <-tick.C
		el := now.Sub(start)
		if el >= cfg.latencyDur {
			break
		}
		due := int(el.Seconds() * float64(cfg.rate))
		for ; sent < due; sent++ {
			t0 := time.Now()
			cl.Produce(ctx, &kgo.Record{Key: []byte(fmt.Sprintf("k%d", sent%1024)), Value: value}, func(_ *kgo.Record, err error) {
				d := time.Since(t0)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if first == nil {
						first = err
					}
					return
				}
				lats = append(lats, d)
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return result{}, first
	}
	if len(lats) == 0 {
		return result{}, errors.New("no records acknowledged")
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	q := func(f float64) time.Duration { return lats[int(f*float64(len(lats)-1))] }
	r := result{records: len(lats), elapsed: elapsed, p50: q(0.50), p99: q(0.99), p999: q(0.999), max: lats[len(lats)-1],
		gc: gcSince(tg.procs, gc0)}
	fs := fsyncNow(tg.procs)
	r.fsync50, r.fsyncs = fs.quantileSince(fs0, 0.50)
	r.fsync99, _ = fs.quantileSince(fs0, 0.99)
	return r, nil
}

// transactional runs prods kgo transactional producers against a fresh
// 6-partition topic for cfg.duration. Each loops: BeginTransaction, cfg.txnRecords
// records (record i to partition i % 6, so every transaction spans all 6), Flush,
// EndTransaction(TryCommit). The result counts committed records only; p50/p99 are
// of the EndTransaction call (AddPartitions already done by the produce; EndTxn and
// the markers).
//
// With profile set, CPU profiles of the client and of tg's processes (for
// cfg.profileSecs from the start) are written under that prefix.
func transactional(ctx context.Context, cfg config, tg target, prods int, profile string) (result, error) {
	const parts = 6
	addrs, closeFn, err := tg.fresh()
	if err != nil {
		return result{}, err
	}
	defer closeFn()
	topic, err := newTopic(ctx, tg, addrs, parts)
	if err != nil {
		return result{}, err
	}
	value := randomValue(cfg.recordBytes)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		lats      []time.Duration
		committed int
		first     error
		produced  []time.Duration
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
		}
	}
	if profile != "" {
		stopProfiles, err := startProfiles(profile, cfg.profileSecs, tg.procs)
		if err != nil {
			return result{}, err
		}
		defer stopProfiles()
	}
	var pg0 map[int]time.Duration
	if tg.pgDB != "" {
		if pg0, err = postgresCPU(ctx, tg.pgDB); err != nil {
			return result{}, fmt.Errorf("postgres CPU: %w", err)
		}
	}
	cpu0 := cpuNow(tg.procs)
	fs0 := fsyncNow(tg.procs)
	start := time.Now()
	end := start.Add(cfg.duration)
	for p := 0; p < prods; p++ {
		cl, err := tg.client(addrs, kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(fmt.Sprintf("%s-txn-%d", topic, p)), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProduceRequestTimeout(30*time.Second),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			return result{}, err
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				tb := time.Now()
				if err := cl.BeginTransaction(); err != nil {
					fail(fmt.Errorf("begin: %w", err))
					return
				}
				for i := 0; i < cfg.txnRecords; i++ {
					cl.Produce(ctx, &kgo.Record{Partition: int32(i % parts), Value: value}, func(_ *kgo.Record, err error) {
						if err != nil {
							fail(fmt.Errorf("produce: %w", err))
						}
					})
				}
				if err := cl.Flush(ctx); err != nil {
					fail(fmt.Errorf("flush: %w", err))
					return
				}
				mu.Lock()
				failed := first != nil
				mu.Unlock()
				if failed {
					return
				}
				t0 := time.Now()
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					fail(fmt.Errorf("commit: %w", err))
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lats = append(lats, d)
				produced = append(produced, t0.Sub(tb))
				committed += cfg.txnRecords
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuSince(tg.procs, cpu0)
	fs := fsyncNow(tg.procs)
	fsync50, fsyncs := fs.quantileSince(fs0, 0.50)
	if tg.pgDB != "" {
		d, err := postgresCPUSince(ctx, tg.pgDB, pg0)
		if err != nil {
			return result{}, fmt.Errorf("postgres CPU: %w", err)
		}
		cpu = append(cpu, d)
	}
	if first != nil {
		return result{}, first
	}
	if len(lats) == 0 {
		return result{}, errors.New("no transaction committed")
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	sort.Slice(produced, func(i, j int) bool { return produced[i] < produced[j] })
	q := func(f float64) time.Duration { return lats[int(f*float64(len(lats)-1))] }
	return result{records: committed, elapsed: elapsed, p50: q(0.50), p99: q(0.99), p999: q(0.999), max: lats[len(lats)-1],
		produce50: produced[len(produced)/2], cpu: cpu, fsync50: fsync50, fsyncs: fsyncs}, nil
}

// saslSSL adds a SASL_SSL listener to opts (a throwaway CA's certificate, one static
// SCRAM user) and returns the client options that reach it, and a cleanup that removes
// the CA's directory.
func saslSSL(opts *stack.Options) ([]kgo.Opt, func(), error) {
	dir, err := os.MkdirTemp("", "kafkabench-tls-")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	ca, err := tlsxtest.NewCAIn(dir)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	cert, key, err := ca.IssueFiles("gateway", "kafka-gateway")
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	const user, pass = "bench", "bench-secret"
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte(user+":"+pass+"\n"), 0o600); err != nil {
		cleanup()
		return nil, nil, err
	}
	tc, err := tlsx.Client{CAFile: ca.CertFile}.Config()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	opts.Listeners = append(opts.Listeners, "SASL_SSL")
	opts.GatewayFlags = append(opts.GatewayFlags, "--tls-cert", cert, "--tls-key", key, "--sasl-users-file", users)
	return []kgo.Opt{kgo.DialTLSConfig(tc), kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, cleanup, nil
}
