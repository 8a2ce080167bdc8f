package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestTxnExhaustedEpochNewProducerID: a kgo producer (transactions v2, EndTxn v5) whose
// transactional id reaches the exhausted epoch (32766; the epoch is set near it in the
// coordinator's Postgres) ends that transaction and goes on with the new producer id
// EndTxn answers (epoch 0): its next transactions commit, the transactional id shows
// the new producer id, and read_committed sees every committed record. Before, the
// epoch stopped at 32767.
func TestTxnExhaustedEpochNewProducerID(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("txnepoch")
	createTopic(t, adm, topic, 2, nil)
	tid := topicName("tid")
	first := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, first, topic, 2, true, "a-0", "a-1")
	ds := waitCompleteCommit(t, adm, tid)
	oldPID := ds[tid].ProducerID
	first.Close()

	// A fresh kgo client ends its first transaction with EndTxn v4 (it opts in to
	// transactions v2 once it has seen a broker's ApiVersions, then reloads its producer
	// id with a KIP-360 InitProducerId at the next begin): InitProducerId bumps 32764 to
	// 32765, the reload to 32766 (exhausted), and the second transaction's EndTxn v5
	// moves the id to a new producer id.
	ctx := ctxT(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, s.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, `UPDATE transactions SET producer_epoch = 32764 WHERE transactional_id = $1`, tid); err != nil {
		t.Fatal(err)
	}
	cl := txnProducer(t, s.KafkaAddrs, tid)
	runTxn(t, cl, topic, 2, true, "b-0", "b-1")
	if d := waitCompleteCommit(t, adm, tid)[tid]; d.ProducerID != oldPID || d.ProducerEpoch != 32765 {
		t.Fatalf("after the first transaction of the second producer: %+v; want producer %d at epoch 32765", d, oldPID)
	}
	runTxn(t, cl, topic, 2, true, "c-0", "c-1")
	ds = waitCompleteCommit(t, adm, tid)
	if d := ds[tid]; d.ProducerID == oldPID || d.ProducerEpoch != 0 {
		t.Fatalf("after the end at the exhausted epoch: %+v; want a new producer id (not %d) at epoch 0", d, oldPID)
	}
	newPID := ds[tid].ProducerID
	runTxn(t, cl, topic, 2, true, "d-0", "d-1")
	runTxn(t, cl, topic, 2, true, "done", "done")
	ds = waitCompleteCommit(t, adm, tid)
	if d := ds[tid]; d.ProducerID != newPID || d.ProducerEpoch != 2 {
		t.Errorf("after two more transactions: %+v; want producer %d at epoch 2", d, newPID)
	}
	got := flatten(consumeUntil(t, s.KafkaAddrs, topic, 2, true, "done"))
	if strings.Join(got, ",") != "a-0,a-1,b-0,b-1,c-0,c-1,d-0,d-1" {
		t.Errorf("read_committed got %v", got)
	}
}

// waitCompleteCommit polls DescribeTransactions until tid is CompleteCommit (EndTxn
// answers before its markers are written).
func waitCompleteCommit(t *testing.T, adm *kadm.Client, tid string) kadm.DescribedTransactions {
	t.Helper()
	var ds kadm.DescribedTransactions
	waitFor(t, 20*time.Second, "DescribeTransactions to show CompleteCommit", func() bool {
		var err error
		ds, err = adm.DescribeTransactions(ctxT(t, 30*time.Second), tid)
		return err == nil && ds[tid].State == "CompleteCommit"
	})
	return ds
}
