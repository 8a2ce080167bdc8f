// Command txnzombie is a Kafka transactional producer for the end-to-end tests that
// gets killed mid-transaction: it begins a transaction on -topic (partition 0),
// produces -n records into it, prints "open <offset of the first>" and then waits,
// never ending the transaction, until it is killed.
//
// Run from tests/e2e: go run ./cmd/txnzombie -brokers 127.0.0.1:9092 -topic t -tid x
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed brokers, comma separated")
	topic := flag.String("topic", "", "topic to produce to (partition 0)")
	tid := flag.String("tid", "", "transactional.id")
	timeout := flag.Duration("timeout", 5*time.Second, "transaction.timeout.ms")
	n := flag.Int("n", 5, "records to produce in the open transaction")
	flag.Parse()
	if err := run(*brokers, *topic, *tid, *timeout, *n); err != nil {
		fmt.Fprintln(os.Stderr, "txnzombie:", err)
		os.Exit(1)
	}
	select {} // wait to be killed
}

func run(brokers, topic, tid string, timeout time.Duration, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.TransactionalID(tid),
		kgo.TransactionTimeout(timeout), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	first := int64(-1)
	for i := 0; i < n; i++ {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte(fmt.Sprintf("zombie-%d", i))}).First()
		if err != nil {
			return err
		}
		if first < 0 {
			first = r.Offset
		}
	}
	fmt.Printf("open %d\n", first)
	return nil
}
