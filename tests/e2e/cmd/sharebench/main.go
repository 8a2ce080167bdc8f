// Command sharebench measures share group (KIP-932) consume throughput: 1 KiB records
// on 6 partitions, produced first, then read by 3 kgo share consumers of one group,
// each record accepted, until every record was accepted; against a Tributary stack
// started from the real binaries (storage-core with fsync on) and against franz-go's
// in-memory kfake, side by side in one run, printing both figures and the ratio (the
// issue's bar: >= 1x kfake).
//
// Run from tests/e2e: go run ./cmd/sharebench [-records 60000] [-rounds 2] [-profile PREFIX]
// It needs the test Postgres and NATS (TRIBUTARY_TEST_POSTGRES_URL,
// TRIBUTARY_TEST_NATS_URL); TRIBUTARY_BIN_DIR reuses prebuilt binaries.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

var profile string

const (
	partitions = 6
	consumers  = 3
	valueBytes = 1024
)

func main() {
	records := flag.Int("records", 60000, "records produced and then consumed per round")
	rounds := flag.Int("rounds", 2, "rounds per target (the best is reported)")
	flag.StringVar(&profile, "profile", "", "write 3 s CPU profiles of kafka-gateway and storage-core taken during the first Tributary round's consume to PREFIX-{gateway,storage}.pprof")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *records, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "sharebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, records, rounds int) error {
	if err := testenv.Check(ctx); err != nil {
		return err
	}
	defer stack.RemoveBinaries()
	s, err := stack.Start(ctx, stack.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	fk, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer fk.Close()
	best := map[string]float64{}
	for r := 0; r < rounds; r++ {
		for _, tg := range []struct {
			name  string
			addrs []string
		}{{"tributary", s.KafkaAddrs}, {"kfake", fk.ListenAddrs()}} {
			var onConsume func()
			if profile != "" && r == 0 && tg.name == "tributary" {
				onConsume = func() {
					for n, p := range map[string]*stack.Proc{"gateway": s.Gateways[0], "storage": s.Storage} {
						go func() {
							if err := stack.FetchProfile("http://"+p.HTTPAddr+"/debug/pprof/profile?seconds=3", profile+"-"+n+".pprof"); err != nil {
								fmt.Fprintf(os.Stderr, "profile of %s: %v\n", n, err)
							}
						}()
					}
				}
			}
			rate, err := round(ctx, tg.addrs, records, onConsume)
			if err != nil {
				return fmt.Errorf("%s: %w", tg.name, err)
			}
			fmt.Printf("round %d %-9s %8.0f records/s (%.1f MiB/s)\n", r+1, tg.name, rate, rate*valueBytes/(1<<20))
			best[tg.name] = max(best[tg.name], rate)
		}
	}
	fmt.Printf("share consume, 1 KiB, %d partitions, %d consumers, ack each: tributary %.0f/s, kfake %.0f/s, ratio %.2fx (bar 1x)\n",
		partitions, consumers, best["tributary"], best["kfake"], best["tributary"]/best["kfake"])
	return nil
}

func name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// round produces records to a new topic, then times 3 share consumers of a new group
// until each record was accepted once; it returns records per second.
func round(ctx context.Context, addrs []string, records int, onConsume func()) (float64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic, group := name("sharebench"), name("sharebench")
	if _, err := adm.CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		return 0, fmt.Errorf("create topic: %w", err)
	}
	value := make([]byte, valueBytes)
	var produceErr atomic.Value
	for i := 0; i < records; i++ {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				produceErr.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return 0, err
	}
	if err, _ := produceErr.Load().(error); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	if err := setEarliest(ctx, cl, group); err != nil {
		return 0, err
	}
	var accepted atomic.Int64
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	if onConsume != nil {
		onConsume()
	}
	var wg sync.WaitGroup
	var end atomic.Int64
	for i := 0; i < consumers; i++ {
		c, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
		if err != nil {
			return 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			for cctx.Err() == nil {
				fs := c.PollFetches(cctx)
				for _, r := range fs.Records() {
					r.Ack(kgo.AckAccept)
				}
				if n := accepted.Add(int64(len(fs.Records()))); n >= int64(records) {
					_ = c.FlushAcks(cctx)
					end.CompareAndSwap(0, time.Now().UnixNano())
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	if n := accepted.Load(); n < int64(records) {
		return 0, fmt.Errorf("accepted %d of %d records before the timeout", n, records)
	}
	return float64(records) / time.Duration(end.Load()-start.UnixNano()).Seconds(), nil
}

// setEarliest sets the group's share.auto.offset.reset to earliest (IncrementalAlterConfigs
// on the GROUP resource, as franz-go's tests do).
func setEarliest(ctx context.Context, cl *kgo.Client, group string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value = "share.auto.offset.reset", kmsg.StringPtr("earliest")
	res.Configs = append(res.Configs, c)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return errors.Join(err, fmt.Errorf("set share.auto.offset.reset on %s", group))
		}
	}
	return nil
}
