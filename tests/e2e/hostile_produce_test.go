package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/libs/channel"
	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// hostileCase is one partition's records in TestHostileProduce and the codes accepted
// for it (Kafka's, REFERENCE.md).
type hostileCase struct {
	name    string
	records []byte
	want    []int16
}

func hostileCases() []hostileCase {
	good := recordBatch([]kv{{[]byte("k"), []byte("v")}, {nil, []byte("w")}})
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	corrupt := []int16{kerr.CorruptMessage.Code}
	invalid := []int16{kerr.InvalidRecord.Code}
	either := []int16{kerr.CorruptMessage.Code, kerr.InvalidRecord.Code}
	// rawRecords builds a batch whose records section is recs, with count n, resealed.
	rawRecords := func(n int32, recs []byte) []byte {
		b := append(bytes.Clone(good[:61]), recs...)
		binary.BigEndian.PutUint32(b[23:], uint32(n-1))
		binary.BigEndian.PutUint32(b[57:], uint32(n))
		return resealBatch(b)
	}
	withCodec := func(codec uint16, body []byte) []byte {
		b := append(bytes.Clone(good[:61]), body...)
		binary.BigEndian.PutUint16(b[21:], codec)
		return resealBatch(b)
	}
	cases := []hostileCase{
		{"null records", nil, invalid},
		{"empty records", []byte{}, invalid},
		{"one byte", []byte{0}, corrupt},
		{"last offset delta off by one", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[23:], 2); return resealBatch(b) }), either},
		{"producer id without a sequence", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint64(b[43:], 12345)
			binary.BigEndian.PutUint16(b[51:], 0)
			return resealBatch(b)
		}), invalid},
		{"truncated frame", good[:len(good)-5], corrupt},
		{"truncated at header", good[:40], corrupt},
		{"batch length past the end", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 1<<30); return b }), corrupt},
		{"batch length negative", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 0xfffffff0); return b }), corrupt},
		{"batch length zero", edit(func(b []byte) []byte { binary.BigEndian.PutUint32(b[8:], 0); return b }), corrupt},
		{"magic 0", edit(func(b []byte) []byte { b[16] = 0; return b }), invalid},
		{"magic 1", edit(func(b []byte) []byte { b[16] = 1; return b }), invalid},
		{"magic 3", edit(func(b []byte) []byte { b[16] = 3; return b }), corrupt},
		{"magic -1", edit(func(b []byte) []byte { b[16] = 0xff; return b }), corrupt},
		{"bad CRC", edit(func(b []byte) []byte { b[18] ^= 0x55; return b }), corrupt},
		{"count too high", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[23:], 2)
			binary.BigEndian.PutUint32(b[57:], 3)
			return resealBatch(b)
		}), either},
		{"count too low", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[23:], 0)
			binary.BigEndian.PutUint32(b[57:], 1)
			return resealBatch(b)
		}), either},
		{"count zero", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[23:], 0xffffffff)
			binary.BigEndian.PutUint32(b[57:], 0)
			return resealBatch(b)
		}), either},
		{"count negative", edit(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[57:], 0x80000000)
			return resealBatch(b)
		}), either},
		{"huge varint length", rawRecords(1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0}), either},
		{"11-byte varint", rawRecords(1, bytes.Repeat([]byte{0x80}, 11)), either},
		{"negative record length", rawRecords(1, binary.AppendVarint(nil, -3)), either},
		{"zero-length record", rawRecords(1, binary.AppendVarint(nil, 0)), either},
		{"negative key length", rawRecords(1, []byte{8, 0, 0, 0, 0x1f, 0, 0}), either},
		{"huge header count", rawRecords(1, append([]byte{10, 0, 0, 0, 1, 1}, binary.AppendVarint(nil, 1<<40)...)), either},
		{"control bit", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[21:], 0x20); return resealBatch(b) }), invalid},
		{"transactional, producer id -1", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[21:], 0x10); return resealBatch(b) }), append(invalid, kerr.InvalidTxnState.Code)},
		{"two batches", append(bytes.Clone(good), good...), invalid},
		{"batch and junk", append(bytes.Clone(good), 1, 2, 3), either},
		{"codec 5", withCodec(5, []byte("junk")), []int16{kerr.UnsupportedCompressionType.Code}},
		{"codec 7", withCodec(7, []byte("junk")), []int16{kerr.UnsupportedCompressionType.Code}},
		{"gzip junk", withCodec(1, []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 1, 2, 3, 4, 5}), corrupt},
		{"snappy junk", withCodec(2, []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9, 0xff, 0xff}), corrupt},
		{"snappy raw junk", withCodec(2, []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2}), corrupt},
		{"lz4 junk", withCodec(3, []byte{0x04, 0x22, 0x4d, 0x18, 0x64, 0x40, 0xa7, 0xff, 0xff, 0xff, 0x7f, 1, 2}), corrupt},
		{"zstd junk", withCodec(4, []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0xff, 0xff, 0xff, 1, 2, 3}), corrupt},
		{"gzip empty", withCodec(1, nil), corrupt},
		{"gzip of a record with offset delta 5", withCodec(1, gzipped([]byte{8, 0, 0, 10, 1, 1, 0, 0})), invalid},
		{"gzip of records past the count", withCodec(1, gzipped(append(bytes.Clone(good[61:]), good[61:]...))), either},
	}
	return cases
}

// gzipped is b gzip-compressed.
func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// TestHostileProduce: every Produce version 3-12 carrying one good partition and one
// partition per bad batch: each bad partition gets its Kafka code and stores nothing,
// the good one is stored, and the log reads back exactly through kgo, kcat and the
// native Read.
func TestHostileProduce(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	cl := newClient(t, s.KafkaAddrs)
	cases := hostileCases()
	topic := topicName("hostile")
	createTopic(t, adm, topic, int32(len(cases)+1), nil)
	td := waitTopic(t, adm, topic, int32(len(cases)+1))
	broker := cl.Broker(int(td.Partitions[0].Leader))
	var want []string
	for v := int16(3); v <= 12; v++ {
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		req.Acks = -1
		req.TimeoutMillis = 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		good := kmsg.NewProduceRequestTopicPartition()
		val := fmt.Sprintf("v%d", v)
		good.Records = recordBatch([]kv{{[]byte("good"), []byte(val)}})
		want = append(want, val)
		rt.Partitions = append(rt.Partitions, good)
		for i, c := range cases {
			p := kmsg.NewProduceRequestTopicPartition()
			p.Partition = int32(i + 1)
			p.Records = c.records
			rt.Partitions = append(rt.Partitions, p)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), broker)
		if err != nil {
			t.Fatalf("v%d: produce: %v", v, err)
		}
		got := map[int32]kmsg.ProduceResponseTopicPartition{}
		for _, rp := range resp.Topics[0].Partitions {
			got[rp.Partition] = rp
		}
		if p := got[0]; p.ErrorCode != 0 || p.BaseOffset != int64(v-3) {
			t.Errorf("v%d good partition: %s at %d, want NONE at %d", v, codeName(p.ErrorCode), p.BaseOffset, v-3)
		}
		for i, c := range cases {
			p, ok := got[int32(i+1)]
			ok2 := false
			for _, w := range c.want {
				ok2 = ok2 || p.ErrorCode == w
			}
			if !ok || !ok2 {
				t.Errorf("v%d %s: %s (present %v), want one of %v", v, c.name, codeName(p.ErrorCode), ok, c.want)
			}
		}
	}
	ends := endOffsets(t, adm, topic)
	for p, e := range ends {
		if p == 0 && e != int64(len(want)) {
			t.Errorf("good partition end offset %d, want %d", e, len(want))
		}
		if p != 0 && e != 0 {
			t.Errorf("partition %d (%s) end offset %d, want 0", p, cases[p-1].name, e)
		}
	}
	recs := consumeAll(t, s.KafkaAddrs, topic)
	var gotVals []string
	for _, r := range recs {
		gotVals = append(gotVals, string(r.Value))
	}
	if fmt.Sprint(gotVals) != fmt.Sprint(want) {
		t.Errorf("read back %v, want %v", gotVals, want)
	}
	// kcat (librdkafka) and the native Read see the same.
	kcat := testenv.RequireBinary(t, "kcat")
	lines := kcatConsume(t, kcat, s.KafkaAddrs[0], topic, len(want))
	for i, l := range lines {
		if l.partition != 0 || l.offset != int64(i) || i >= len(want) || l.line != "good:"+want[i] {
			t.Errorf("kcat record %d: %d/%d %q, want 0/%d good:%s", i, l.partition, l.offset, l.line, i, want[min(i, len(want)-1)])
		}
	}
	rr, err := storageClient(t, s.StorageAddr).Read(ctxT(t, 20*time.Second), &storagev1.ReadRequest{Channel: channel.KafkaPartition(topic, 0), FromSequence: 1})
	if err != nil {
		t.Fatalf("native Read: %v", err)
	}
	var native []string
	for _, r := range rr.Records {
		native = append(native, string(r.Value))
	}
	if fmt.Sprint(native) != fmt.Sprint(want) {
		t.Errorf("native Read %v, want %v", native, want)
	}
}

// TestHostileProduceAcksZero: acks=0 gets no answer; a request whose partitions all
// succeed keeps the connection (the next request on it is answered), one with a bad
// partition closes it as Kafka does, and either way the good partitions are stored and
// the bad ones not.
func TestHostileProduceAcksZero(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("hostile0")
	createTopic(t, adm, topic, 2, nil)
	waitTopic(t, adm, topic, 2)
	formatter := kmsg.NewRequestFormatter(kmsg.FormatterClientID("hostile"))
	produce := func(v int16, bad bool) []byte {
		req := kmsg.NewPtrProduceRequest()
		req.Version = v
		req.Acks = 0
		req.TimeoutMillis = 10000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = topic
		p := kmsg.NewProduceRequestTopicPartition()
		p.Records = recordBatch([]kv{{nil, []byte(fmt.Sprintf("v%d-%v", v, bad))}})
		rt.Partitions = append(rt.Partitions, p)
		if bad {
			p := kmsg.NewProduceRequestTopicPartition()
			p.Partition = 1
			p.Records = hostileCase_("bad CRC").records
			rt.Partitions = append(rt.Partitions, p)
		}
		req.Topics = append(req.Topics, rt)
		return formatter.AppendRequest(nil, req, int32(v))
	}
	want := int64(0)
	for v := int16(3); v <= 12; v++ {
		conn, err := net.DialTimeout("tcp", s.KafkaAddrs[0], 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// All good, then an ApiVersions on the same connection: answered, with its
		// correlation id (no Produce answer came first).
		av := kmsg.NewPtrApiVersionsRequest()
		frame := append(produce(v, false), formatter.AppendRequest(nil, av, 1000+int32(v))...)
		if _, err := conn.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		head := make([]byte, 8)
		if _, err := io.ReadFull(conn, head); err != nil {
			t.Fatalf("v%d acks=0 good produce then ApiVersions: %v", v, err)
		}
		if corr := int32(binary.BigEndian.Uint32(head[4:])); corr != 1000+int32(v) {
			t.Fatalf("v%d: first answer has correlation id %d, want the ApiVersions' %d", v, corr, 1000+int32(v))
		}
		_ = conn.Close()
		want++
		if err := expectClosed(s.KafkaAddrs[0], produce(v, true)); err != nil {
			t.Errorf("v%d acks=0 with a bad partition: %v", v, err)
		}
		want++
	}
	// acks=0 writes are not awaited by the client: poll for them.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ends := endOffsets(t, adm, topic)
		if ends[0] == want && ends[1] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("end offsets %v, want %d and 0", ends, want)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
}

// hostileCase_ is the hostileCases entry named name.
func hostileCase_(name string) hostileCase {
	for _, c := range hostileCases() {
		if c.name == name {
			return c
		}
	}
	panic("no hostile case " + name)
}

// TestHostileNativeAppend: storage-core's AppendBatches and AppendStream with the same
// bad batches, with and without single_batch and validate_only, to unknown and
// reserved channels: each channel gets its own code in the answer, validate_only and
// refused channels store nothing, the good channel of the same request is stored, and
// the stream keeps serving after every bad request.
func TestHostileNativeAppend(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	topic := topicName("hostilen")
	createTopic(t, adm, topic, 1, nil)
	waitTopic(t, adm, topic, 1)
	ch := channel.KafkaPartition(topic, 0)
	st := storageClient(t, s.StorageAddr)
	good := recordBatch([]kv{{nil, []byte("n")}})
	stream, err := st.AppendStream(ctxT(t, 2*time.Minute))
	if err != nil {
		t.Fatalf("AppendStream: %v", err)
	}
	stored := int64(0)
	id := uint64(0)
	for _, c := range hostileCases() {
		for _, single := range []bool{true, false} {
			for _, validate := range []bool{true, false} {
				chans := []*storagev1.ChannelBatches{
					{Channel: ch, Batches: c.records, SingleBatch: single, ValidateOnly: validate},
					{Channel: ch + "-nope", Batches: good, SingleBatch: single, ValidateOnly: validate},
					{Channel: "_x", Batches: good, SingleBatch: single, ValidateOnly: validate},
					{Channel: ch, Batches: good, SingleBatch: single, ValidateOnly: validate},
				}
				what := fmt.Sprintf("%s (single %v, validate_only %v)", c.name, single, validate)
				check := func(api string, rs []*storagev1.ChannelAppendResult) {
					t.Helper()
					if len(rs) != 4 {
						t.Fatalf("%s %s: %d results, want 4", api, what, len(rs))
					}
					if rs[0].Error == storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED && !(c.name == "two batches" && !single) {
						t.Errorf("%s %s: accepted", api, what)
					}
					if rs[1].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
						t.Errorf("%s %s: unknown channel answered %v", api, what, rs[1].Error)
					}
					if rs[2].Error != storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL && rs[2].Error != storagev1.ErrorCode_ERROR_CODE_CHANNEL_NOT_FOUND {
						t.Errorf("%s %s: reserved channel answered %v", api, what, rs[2].Error)
					}
					if rs[3].Error != storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
						t.Errorf("%s %s: good batch answered %v %s", api, what, rs[3].Error, rs[3].ErrorMessage)
					}
					if !validate {
						stored++
						if rs[0].Error == storagev1.ErrorCode_ERROR_CODE_UNSPECIFIED {
							stored += 4 // "two batches" without single_batch: two frames of two records
						}
					}
				}
				resp, err := st.AppendBatches(ctxT(t, 20*time.Second), &storagev1.AppendBatchesRequest{Channels: chans})
				if err != nil {
					t.Fatalf("AppendBatches %s: %v", what, err)
				}
				check("AppendBatches", resp.Results)
				id++
				if err := stream.Send(&storagev1.AppendStreamRequest{Id: id, Channels: chans}); err != nil {
					t.Fatalf("AppendStream send %s: %v", what, err)
				}
				sr, err := stream.Recv()
				if err != nil {
					t.Fatalf("AppendStream recv %s: %v", what, err)
				}
				if sr.Id != id {
					t.Fatalf("AppendStream %s: answer id %d, want %d", what, sr.Id, id)
				}
				check("AppendStream", sr.Results)
			}
		}
	}
	_ = stream.CloseSend()
	if got := endOffsets(t, adm, topic)[0]; got != stored {
		t.Errorf("end offset %d, want %d", got, stored)
	}
}

// TestHostileProduceForgedTimestamps: on a CreateTime topic a producer's batch header
// claiming LogAppendTime, or a max timestamp far past its records, does not change
// the records' timestamps a consumer sees nor what ListOffsets by timestamp finds
// (Kafka's LogValidator rewrites both header fields).
func TestHostileProduceForgedTimestamps(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	cl := newClient(t, s.KafkaAddrs)
	topic := topicName("hostilets")
	createTopic(t, adm, topic, 1, nil)
	td := waitTopic(t, adm, topic, 1)
	created := time.Now().Add(-time.Hour).UnixMilli()
	forge := func(attrs uint16, maxTS int64) []byte {
		b := recordBatch([]kv{{nil, []byte("forged")}})
		binary.BigEndian.PutUint64(b[27:], uint64(created))
		binary.BigEndian.PutUint16(b[21:], attrs)
		binary.BigEndian.PutUint64(b[35:], uint64(maxTS))
		return resealBatch(b)
	}
	for _, b := range [][]byte{forge(0x08, 42), forge(0, created+365*24*3600*1000)} {
		if code, _ := rawProduce(t, cl, td.Partitions[0].Leader, td, 0, b); code != 0 {
			t.Fatalf("produce: %s", codeName(code))
		}
	}
	for _, r := range consumeAll(t, s.KafkaAddrs, topic) {
		if r.Timestamp.UnixMilli() != created || r.Attrs.TimestampType() != 0 {
			t.Errorf("record %d: timestamp %d (type %d), want its create time %d", r.Offset, r.Timestamp.UnixMilli(), r.Attrs.TimestampType(), created)
		}
	}
	lo, err := adm.ListOffsetsAfterMilli(ctxT(t, 20*time.Second), created+1, topic)
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	if o, _ := lo.Lookup(topic, 0); o.Err != nil || o.Offset != 2 {
		t.Errorf("ListOffsets after every record's timestamp: offset %d (%v), want 2 (the end)", o.Offset, o.Err)
	}
}

// TestHostileProduceLarge: one 30 MiB Produce request of 30 partitions with a batch of
// just under the default max.message.bytes each, and one partition a little over it:
// the 30 are stored whole, the large one is MESSAGE_TOO_LARGE, and the connection
// serves the next request.
func TestHostileProduceLarge(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	cl := newClient(t, s.KafkaAddrs)
	const parts = 31
	topic := topicName("hostilebig")
	createTopic(t, adm, topic, parts, nil)
	td := waitTopic(t, adm, topic, parts)
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for p := int32(0); p < parts; p++ {
		size := 1_000_000
		if p == parts-1 {
			size = 1_100_000
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = p
		rp.Records = recordBatch([]kv{{nil, bytes.Repeat([]byte{byte('a' + p%26)}, size)}})
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	broker := cl.Broker(int(td.Partitions[0].Leader))
	resp, err := req.RequestWith(ctxT(t, 60*time.Second), broker)
	if err != nil {
		t.Fatalf("30 MiB produce: %v", err)
	}
	for _, rp := range resp.Topics[0].Partitions {
		want := int16(0)
		if rp.Partition == parts-1 {
			want = kerr.MessageTooLarge.Code
		}
		if rp.ErrorCode != want {
			t.Errorf("partition %d: %s, want %s", rp.Partition, codeName(rp.ErrorCode), codeName(want))
		}
	}
	if _, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctxT(t, 20*time.Second), broker); err != nil {
		t.Errorf("ApiVersions after the large produce: %v", err)
	}
	ends := endOffsets(t, adm, topic)
	for p := int32(0); p < parts; p++ {
		want := int64(1)
		if p == parts-1 {
			want = 0
		}
		if ends[p] != want {
			t.Errorf("partition %d end offset %d, want %d", p, ends[p], want)
		}
	}
	recs := consumeAll(t, s.KafkaAddrs, topic, kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(2<<20))
	if len(recs) != parts-1 {
		t.Fatalf("read %d records, want %d", len(recs), parts-1)
	}
	for _, r := range recs {
		if len(r.Value) != 1_000_000 || r.Value[0] != byte('a'+r.Partition%26) || r.Value[len(r.Value)-1] != r.Value[0] {
			t.Errorf("partition %d: record of %d bytes, starting %q", r.Partition, len(r.Value), r.Value[:1])
		}
	}
}

// TestHostileProduceRepeatedPartition: a partition listed twice in one Produce is
// appended once with its last entry's records and answered once (Kafka keys both by
// topic-partition): a bad batch then a good one stores the good one, a good one then a
// bad one stores nothing and answers the bad one's code.
func TestHostileProduceRepeatedPartition(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	cl := newClient(t, s.KafkaAddrs)
	topic := topicName("hostilerep")
	createTopic(t, adm, topic, 2, nil)
	td := waitTopic(t, adm, topic, 2)
	good := recordBatch([]kv{{nil, []byte("last")}})
	bad := hostileCase_("bad CRC").records
	for p, order := range [][2][]byte{{bad, good}, {good, bad}} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks = -1
		req.TimeoutMillis = 10000
		for _, recs := range order {
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = int32(p)
			rp.Records = recs
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl.Broker(int(td.Partitions[int32(p)].Leader)))
		if err != nil {
			t.Fatalf("produce: %v", err)
		}
		n := 0
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				n++
				want := int16(0)
				if p == 1 {
					want = kerr.CorruptMessage.Code
				}
				if rp.ErrorCode != want {
					t.Errorf("partition %d: %s, want %s", p, codeName(rp.ErrorCode), codeName(want))
				}
			}
		}
		if n != 1 {
			t.Errorf("partition %d listed twice: %d answers, want 1", p, n)
		}
	}
	if ends := endOffsets(t, adm, topic); ends[0] != 1 || ends[1] != 0 {
		t.Errorf("end offsets %v, want 1 and 0", ends)
	}
}
