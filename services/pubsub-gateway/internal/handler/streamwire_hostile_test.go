package handler

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// TestHostileStreamWireOddInputs: the encoder agrees with proto byte for byte (and on
// flow-control sizes) for inputs TestStreamWireMatchesProto does not draw: values over
// 4 MiB and at varint length boundaries, many attributes with non-ASCII and
// prefix-sharing keys (map order), extreme attempts, source sequences and record
// timestamps, publish times at the ends of RFC 3339's range and with offsets, and a
// publish time cache that sees the same value after a failed parse.
func TestHostileStreamWireOddInputs(t *testing.T) {
	rnd := rand.New(rand.NewSource(11))
	h := New(Deps{}).Subscriber
	pick := func(xs ...string) string { return xs[rnd.Intn(len(xs))] }
	for round := 0; round < 150; round++ {
		sub := &subInfo{spec: &pubsubpb.Subscription{}}
		if rnd.Intn(2) == 0 {
			sub.spec.DeadLetterPolicy = &pubsubpb.DeadLetterPolicy{MaxDeliveryAttempts: 5}
		}
		props := &pubsubpb.StreamingPullResponse_SubscriptionProperties{ExactlyOnceDeliveryEnabled: rnd.Intn(2) == 0, MessageOrderingEnabled: rnd.Intn(2) == 0}
		var ds []delivery
		for i := rnd.Intn(4) + 1; i > 0; i-- {
			d := delivery{ackID: fmt.Sprintf("%x.%x.%x", rnd.Uint64(), rnd.Intn(1e6), rnd.Intn(1e6)),
				attempt:   []int32{0, 1, -1, math.MaxInt32, math.MinInt32}[rnd.Intn(5)],
				sourceSeq: []int64{0, -1, math.MaxInt64, math.MinInt64, 127, 128}[rnd.Intn(6)],
				ts:        []int64{0, -1, 1, math.MaxInt64 / 1000, -62135596800000, 253402300799999, 1 << 41}[rnd.Intn(7)]}
			switch rnd.Intn(6) {
			case 0:
				d.value = make([]byte, 4<<20+rnd.Intn(1000))
			case 1:
				d.value = make([]byte, []int{127, 128, 16383, 16384, 2097151, 2097152}[rnd.Intn(6)])
			case 2:
				d.value = []byte("é")
			}
			for j := rnd.Intn(20); j > 0; j-- {
				k := pick("a", "ab", "a\x00", "é", "z", "Ä", "日本", "a_", "A", "", hdrAttrPrefix+"é", hdrAttrPrefix, hdrPublishTime, hdrPublishTime, hdrOrderingKey, hdrMessageID, hdrDeadLetterSourceTime)
				v := pick("", "v", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "2026-12-01T10:00:00.5-23:59", "2026-12-01T10:00:00.000000001+14:00",
					"2026-02-30T10:00:00Z", "not a time", "-9223372036854775808", "9223372036854775807", "日本")
				if k == hdrMessageID && rnd.Intn(3) == 0 {
					v = ""
				}
				d.headers = append(d.headers, storedHeader{key: k, value: []byte(v)})
			}
			ds = append(ds, d)
		}
		checkWireBatch(t, h, sub, props, ds)
	}
}
