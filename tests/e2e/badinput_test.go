package e2e

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
)

// kv is one record of a hand-built batch.
type kv struct{ key, value []byte }

// recordBatch encodes records as one uncompressed, non-idempotent Kafka RecordBatch v2
// (KIP-98 format) with a correct CRC-32C.
func recordBatch(records []kv) []byte {
	ts := time.Now().UnixMilli()
	var recs []byte
	for i, r := range records {
		var body []byte
		body = append(body, 0)                     // attributes
		body = binary.AppendVarint(body, 0)        // timestamp delta
		body = binary.AppendVarint(body, int64(i)) // offset delta
		body = binary.AppendVarint(body, int64(len(r.key)))
		body = append(body, r.key...)
		body = binary.AppendVarint(body, int64(len(r.value)))
		body = append(body, r.value...)
		body = binary.AppendVarint(body, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(body)))
		recs = append(recs, body...)
	}
	b := make([]byte, 0, 61+len(recs))
	b = binary.BigEndian.AppendUint64(b, 0)                      // base offset
	b = binary.BigEndian.AppendUint32(b, 0)                      // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)             // partition leader epoch -1
	b = append(b, 2)                                             // magic
	b = binary.BigEndian.AppendUint32(b, 0)                      // crc, below
	b = binary.BigEndian.AppendUint16(b, 0)                      // attributes
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)-1)) // last offset delta
	b = binary.BigEndian.AppendUint64(b, uint64(ts))             // first timestamp
	b = binary.BigEndian.AppendUint64(b, uint64(ts))             // max timestamp
	b = binary.BigEndian.AppendUint64(b, 0xffffffffffffffff)     // producer id -1
	b = binary.BigEndian.AppendUint16(b, 0xffff)                 // producer epoch -1
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)             // base sequence -1
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	b = append(b, recs...)
	binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// rawProduce sends one Produce (acks=all) carrying batch for topic/partition straight
// to broker and returns the partition's error code and base offset.
func rawProduce(t *testing.T, cl *kgo.Client, broker int32, td kadm.TopicDetail, partition int32, batch []byte) (int16, int64) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = td.Topic
	rt.TopicID = td.ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl.Broker(int(broker)))
	if err != nil {
		t.Fatalf("raw produce to %s/%d: %v", td.Topic, partition, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("raw produce: unexpected response shape %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	return p.ErrorCode, p.BaseOffset
}

func codeName(code int16) string {
	if err := kerr.ErrorForCode(code); err != nil {
		return err.Error()
	}
	return "NONE"
}

// TestBadInput: each bad request gets the Kafka answer Kafka gives, bad frames close
// only their own connection, the native API refuses reserved channels, and nothing
// already stored changes.
func TestBadInput(t *testing.T) {
	s := sharedStack(t)
	addrs := s.KafkaAddrs
	adm := newAdmin(t, addrs)
	cl := newClient(t, addrs)

	// Records stored before any bad input, compared at the end.
	stable := topicName("stable")
	createTopic(t, adm, stable, 3, nil)
	produceKeyed(t, cl, stable, "stable", 300)
	before := snapshot(consumeAll(t, addrs, stable))

	target := topicName("target")
	createTopic(t, adm, target, 3, nil)
	td := waitTopic(t, adm, target, 3)
	leader0 := td.Partitions[0].Leader
	produceKeyed(t, cl, target, "target", 30)
	targetBefore := endOffsets(t, adm, target)

	t.Run("InvalidTopicNames", func(t *testing.T) {
		bad := []string{"a~b", "..", ".", strings.Repeat("x", 250), "a b", "a/b", ""}
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 15000
		for _, name := range bad {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic = name
			rt.NumPartitions = 1
			rt.ReplicationFactor = -1
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
		if err != nil {
			t.Fatalf("CreateTopics: %v", err)
		}
		got := map[string]int16{}
		for _, rt := range resp.Topics {
			got[rt.Topic] = rt.ErrorCode
		}
		for _, name := range bad {
			code, ok := got[name]
			if !ok {
				t.Errorf("CreateTopics %q: no answer for this topic", name)
			} else if code != kerr.InvalidTopicException.Code {
				t.Errorf("CreateTopics %q: %s, want INVALID_TOPIC_EXCEPTION", name, codeName(code))
			}
		}
		listed, err := adm.ListTopics(ctxT(t, 20*time.Second))
		if err != nil {
			t.Fatalf("ListTopics: %v", err)
		}
		for _, name := range bad {
			if listed.Has(name) {
				t.Errorf("invalid topic %q exists after CreateTopics", name)
			}
		}
	})

	t.Run("InvalidPartitions", func(t *testing.T) {
		for _, n := range []int32{0, 257} {
			req := kmsg.NewPtrCreateTopicsRequest()
			req.TimeoutMillis = 15000
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic = topicName("parts")
			rt.NumPartitions = n
			rt.ReplicationFactor = -1
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
			if err != nil {
				t.Fatalf("CreateTopics: %v", err)
			}
			if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.InvalidPartitions.Code {
				t.Errorf("CreateTopics with %d partitions: %+v, want INVALID_PARTITIONS", n, resp.Topics)
			}
		}
		// Shrinking a topic is refused; growing past 256 too.
		for _, n := range []int32{2, 257} {
			req := kmsg.NewPtrCreatePartitionsRequest()
			req.TimeoutMillis = 15000
			rt := kmsg.NewCreatePartitionsRequestTopic()
			rt.Topic = target
			rt.Count = n
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
			if err != nil {
				t.Fatalf("CreatePartitions: %v", err)
			}
			if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != kerr.InvalidPartitions.Code {
				t.Errorf("CreatePartitions %s 3 -> %d: %+v, want INVALID_PARTITIONS", target, n, resp.Topics)
			}
		}
		waitTopic(t, adm, target, 3)
	})

	t.Run("CorruptBatch", func(t *testing.T) {
		good := recordBatch([]kv{{[]byte("raw-k"), []byte("raw-v")}})
		bad := append([]byte(nil), good...)
		bad[20] ^= 0xff // CRC byte
		if code, _ := rawProduce(t, cl, leader0, td, 0, bad); code != kerr.CorruptMessage.Code {
			t.Errorf("produce of a batch with a bad CRC: %s, want CORRUPT_MESSAGE", codeName(code))
		}
		trunc := append([]byte(nil), good[:len(good)-3]...)
		binary.BigEndian.PutUint32(trunc[8:12], uint32(len(trunc)-12))
		binary.BigEndian.PutUint32(trunc[17:21], crc32.Checksum(trunc[21:], crc32.MakeTable(crc32.Castagnoli)))
		if code, _ := rawProduce(t, cl, leader0, td, 0, trunc); code != kerr.CorruptMessage.Code && code != kerr.InvalidRecord.Code {
			t.Errorf("produce of a batch whose last record is cut short (CRC correct): %s, want CORRUPT_MESSAGE or INVALID_RECORD", codeName(code))
		}
		// The same batch with its CRC intact is accepted (the raw path works).
		code, off := rawProduce(t, cl, leader0, td, 0, good)
		if code != 0 || off != targetBefore[0] {
			t.Fatalf("produce of the valid hand-built batch: %s at offset %d, want NONE at %d", codeName(code), off, targetBefore[0])
		}
		targetBefore[0]++
	})

	t.Run("UnknownPartition", func(t *testing.T) {
		batch := recordBatch([]kv{{nil, []byte("nowhere")}})
		if code, _ := rawProduce(t, cl, leader0, td, 7, batch); code != kerr.UnknownTopicOrPartition.Code {
			t.Errorf("produce to partition 7 of a 3-partition topic: %s, want UNKNOWN_TOPIC_OR_PARTITION", codeName(code))
		}
	})

	t.Run("FetchPastHighWatermark", func(t *testing.T) {
		hwm := endOffsets(t, adm, target)[0]
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis = 100
		req.MinBytes = 1
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = target
		rt.TopicID = td.ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = 0
		rp.FetchOffset = hwm + 10
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t, 20*time.Second), cl.Broker(int(leader0)))
		if err != nil {
			t.Fatalf("fetch: %v", err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch: unexpected response shape %+v (top-level error %s)", resp, codeName(resp.ErrorCode))
		}
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != kerr.OffsetOutOfRange.Code {
			t.Errorf("fetch at offset %d past the high watermark %d: %s, want OFFSET_OUT_OF_RANGE", hwm+10, hwm, codeName(p.ErrorCode))
		}
	})

	t.Run("MessageTooLarge", func(t *testing.T) {
		large := topicName("large")
		createTopic(t, adm, large, 1, nil)
		ltd := waitTopic(t, adm, large, 1)
		resps, err := adm.AlterTopicConfigs(ctxT(t, 20*time.Second), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("1024")}}, large)
		if err != nil || len(resps) != 1 || resps[0].Err != nil {
			t.Fatalf("IncrementalAlterConfigs max.message.bytes=1024: %v %+v", err, resps)
		}
		cfgs, err := adm.DescribeTopicConfigs(ctxT(t, 20*time.Second), large)
		if err != nil {
			t.Fatalf("DescribeConfigs: %v", err)
		}
		if c, err := cfgs.On(large, nil); err != nil {
			t.Fatalf("DescribeConfigs %s: %v", large, err)
		} else {
			found := false
			for _, e := range c.Configs {
				if e.Key == "max.message.bytes" {
					found = true
					if e.Value == nil || *e.Value != "1024" {
						t.Errorf("DescribeConfigs max.message.bytes = %v, want 1024", e.Value)
					}
				}
			}
			if !found {
				t.Errorf("DescribeConfigs does not list max.message.bytes")
			}
		}
		// Incompressible, so that kgo's default compression cannot bring it under the limit.
		noise := make([]byte, 4096)
		_, _ = rand.Read(noise)
		big := recordBatch([]kv{{nil, noise}})
		// The config change reaches the gateways asynchronously (as in Kafka); poll.
		accepted := 0
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, _ := rawProduce(t, cl, ltd.Partitions[0].Leader, ltd, 0, big)
			if code == kerr.MessageTooLarge.Code {
				break
			}
			if code == 0 {
				accepted++
			} else {
				t.Fatalf("produce of a 4 KiB record over max.message.bytes=1024: %s, want MESSAGE_TOO_LARGE", codeName(code))
			}
			if time.Now().After(deadline) {
				t.Fatalf("a 4 KiB record was still accepted %d times 15 s after max.message.bytes=1024", accepted)
			}
			time.Sleep(100 * time.Millisecond) // poll interval
		}
		if accepted > 0 {
			t.Logf("note: %d oversize batches were accepted before max.message.bytes took effect", accepted)
		}
		// kgo reports it to the application too.
		kcl := newClient(t, addrs)
		err = kcl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Topic: large, Value: noise}).FirstErr()
		if !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("kgo produce of a 4 KiB record: %v, want MESSAGE_TOO_LARGE", err)
		}
		small := recordBatch([]kv{{nil, []byte("small")}})
		if code, _ := rawProduce(t, cl, ltd.Partitions[0].Leader, ltd, 0, small); code != 0 {
			t.Errorf("produce of a small record under max.message.bytes: %s", codeName(code))
		}
		if got := endOffsets(t, adm, large)[0]; got != int64(accepted+1) {
			t.Errorf("%s end offset %d, want %d", large, got, accepted+1)
		}
	})

	t.Run("BadFrames", func(t *testing.T) {
		// A client connected before and used after the bad frames must keep working.
		keep := newClient(t, addrs, kgo.DefaultProduceTopic(target))
		if err := keep.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Value: []byte("before bad frames")}).FirstErr(); err != nil {
			t.Fatalf("produce before bad frames: %v", err)
		}
		targetBefore = endOffsets(t, adm, target)
		frames := map[string][]byte{
			"size 2GiB-1":          {0x7f, 0xff, 0xff, 0xff},
			"size 2GiB (negative)": {0x80, 0x00, 0x00, 0x00},
			"garbage header":       append([]byte{0, 0, 0, 16}, []byte{0xff, 0xff, 0xff, 0xff, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff, 0x13, 0x37, 0x13, 0x37, 0x13, 0x37}...),
		}
		for name, frame := range frames {
			if err := expectClosed(addrs[0], frame); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		// An ApiVersions request at a version the server does not know is answered
		// (Kafka: an ApiVersions v0 response with UNSUPPORTED_VERSION) or the
		// connection is closed.
		if err := expectUnsupportedVersion(addrs[0]); err != nil {
			t.Errorf("ApiVersions v99: %v", err)
		}
		if !s.Gateways[0].Running() {
			t.Fatalf("kafka-gateway died after bad frames")
		}
		if err := keep.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Value: []byte("after bad frames")}).FirstErr(); err != nil {
			t.Fatalf("produce on the existing client after bad frames: %v", err)
		}
		targetBefore = endOffsets(t, adm, target)
	})

	t.Run("ReservedChannel", func(t *testing.T) {
		st := storageClient(t, s.StorageAddr)
		_, err := st.Append(ctxT(t, 20*time.Second), &storagev1.AppendRequest{Channel: "_TRIBUTARY_x", Records: []*storagev1.AppendRecord{{Value: []byte("x")}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("Append to _TRIBUTARY_x: %v, want PERMISSION_DENIED", err)
		}
		_, err = st.CreateChannel(ctxT(t, 20*time.Second), &storagev1.CreateChannelRequest{Name: "_TRIBUTARY_x"})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("CreateChannel _TRIBUTARY_x: %v, want PERMISSION_DENIED", err)
		}
		ab, err := st.AppendBatches(ctxT(t, 20*time.Second), &storagev1.AppendBatchesRequest{Channels: []*storagev1.ChannelBatches{{Channel: "_TRIBUTARY_x", Batches: recordBatch([]kv{{nil, []byte("x")}})}}})
		if status.Code(err) != codes.PermissionDenied && (err != nil || len(ab.Results) != 1 || ab.Results[0].Error != storagev1.ErrorCode_ERROR_CODE_RESERVED_CHANNEL) {
			t.Errorf("AppendBatches to _TRIBUTARY_x: %v %v, want PERMISSION_DENIED or RESERVED_CHANNEL", err, ab)
		}
	})

	// Nothing stored before changed.
	after := snapshot(consumeAll(t, addrs, stable))
	if !reflect.DeepEqual(before, after) {
		t.Errorf("records of %s changed after the bad inputs: %d records before, %d after", stable, len(before), len(after))
	}
	if got := endOffsets(t, adm, target); !reflect.DeepEqual(got, targetBefore) {
		t.Errorf("end offsets of %s = %v after rejected requests, want %v", target, got, targetBefore)
	}
}

// expectClosed writes frame on a new connection to addr and expects the server to
// close the connection within 5 s.
func expectClosed(addr string, frame []byte) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Write(frame); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	read := 0
	for {
		n, err := conn.Read(buf)
		read += n
		if err == nil {
			continue
		}
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			return nil
		case errors.As(err, &ne) && ne.Timeout():
			return fmt.Errorf("connection still open 5 s after the frame (%d bytes answered)", read)
		default:
			return err
		}
	}
}

// expectUnsupportedVersion sends ApiVersions v99 and accepts either a closed
// connection or a response carrying UNSUPPORTED_VERSION (35).
func expectUnsupportedVersion(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	// size 10: api key 18, version 99, correlation id 7, null client id.
	if _, err := conn.Write([]byte{0, 0, 0, 10, 0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff}); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 10) // size, correlation id, error code
	if _, err := io.ReadFull(conn, head); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil
		}
		return fmt.Errorf("no answer and no close: %w", err)
	}
	if corr := binary.BigEndian.Uint32(head[4:]); corr != 7 {
		return fmt.Errorf("answer has correlation id %d, want 7", corr)
	}
	if code := int16(binary.BigEndian.Uint16(head[8:])); code != kerr.UnsupportedVersion.Code {
		return fmt.Errorf("answer has error code %d (%s), want UNSUPPORTED_VERSION", code, codeName(code))
	}
	return nil
}
