package handler

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/services/kafka-gateway/internal/fake"
)

// reseal recomputes a hand-edited batch's CRC-32C.
func reseal(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// TestProduceRefusalCodes: the code a client gets for each kind of bad records, all
// of them storage-core's answers (the gateway validates nothing), and for a
// transactional batch the order of the coordinator's and storage-core's answers:
// a corrupt batch is CORRUPT_MESSAGE whether or not its transaction is confirmed, a
// sound one that is not in its transaction is the coordinator's code.
func TestProduceRefusalCodes(t *testing.T) {
	e, ft := newTxnEnv(t)
	e.createTopic(t, "t", 1, nil)
	control := func(b []byte) []byte { binary.BigEndian.PutUint16(b[21:], 0x30); return b }
	badCRC := func(b []byte) []byte { b[17] ^= 0xff; return b }
	magic1Short := func(b []byte) []byte {
		b[16] = 1
		binary.BigEndian.PutUint32(b[8:], 30)
		return b[:42]
	}
	tid := "tx"
	cases := []struct {
		name    string
		recs    []byte
		txnCode int16 // the coordinator's answer to a transactional batch
		want    int16
	}{
		{"control batch", reseal(control(fake.Batch("c"))), 0, kerr.InvalidRecord.Code},
		{"control batch, bad CRC", badCRC(control(fake.Batch("c"))), 0, kerr.CorruptMessage.Code},
		{"magic 1, shorter than a header", magic1Short(fake.Batch("m")), 0, kerr.InvalidRecord.Code},
		{"a batch and 5 bytes", append(fake.Batch("a"), 1, 2, 3, 4, 5), 0, kerr.CorruptMessage.Code},
		{"a batch and a transactional one", append(fake.Batch("a"), txnBatch()...), 0, kerr.InvalidRecord.Code},
		{"two transactional batches", append(txnBatch(), txnBatch()...), 0, kerr.InvalidRecord.Code},
		{"transactional, bad CRC, confirmed", badCRC(txnBatch()), 0, kerr.CorruptMessage.Code},
		{"transactional, bad CRC, not in the transaction", badCRC(txnBatch()), kerr.InvalidTxnState.Code, kerr.CorruptMessage.Code},
		{"transactional, bad CRC, fenced", badCRC(txnBatch()), kerr.ProducerFenced.Code, kerr.CorruptMessage.Code},
		{"transactional, not in the transaction", txnBatch(), kerr.InvalidTxnState.Code, kerr.InvalidTxnState.Code},
		{"transactional, fenced", txnBatch(), kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code},
	}
	for _, c := range cases {
		ft.code = int32(c.txnCode)
		before := e.st.HighWatermark("kafka.t")
		req := produceReq("t", 0, bytes.Clone(c.recs))
		req.TransactionID = &tid
		if got := e.do(t, req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode; got != c.want {
			t.Errorf("%s: %s, want %s", c.name, code(got), code(c.want))
		}
		if hw := e.st.HighWatermark("kafka.t"); hw != before {
			t.Errorf("%s: stored (high watermark %d, was %d)", c.name, hw, before)
		}
	}
}
