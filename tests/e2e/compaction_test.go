package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCompactedTopicConfigs: the compaction configs are validated (a ratio above 1, a
// max.compaction.lag.ms below min.compaction.lag.ms are INVALID_CONFIG) and a produce of
// a record without a key to a compacted topic is INVALID_RECORD for kgo, with nothing
// stored, while a keyed record is stored.
func TestCompactedTopicConfigs(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	for _, bad := range []map[string]*string{
		{"cleanup.policy": kadm.StringPtr("compact"), "min.cleanable.dirty.ratio": kadm.StringPtr("1.5")},
		{"min.compaction.lag.ms": kadm.StringPtr("1000"), "max.compaction.lag.ms": kadm.StringPtr("999")},
	} {
		rs, err := adm.CreateTopic(ctxT(t, 20*time.Second), 1, 1, bad, topicName("badcompact"))
		if err == nil {
			err = rs.Err
		}
		if !errors.Is(err, kerr.InvalidConfig) {
			t.Fatalf("CreateTopics %v: %v, want INVALID_CONFIG", bad, err)
		}
	}

	topic := topicName("compactkey")
	createTopic(t, adm, topic, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"), "min.compaction.lag.ms": kadm.StringPtr("10")})
	cl := newClient(t, s.KafkaAddrs, kgo.RecordRetries(0))
	err := cl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Topic: topic, Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("produce without a key to a compacted topic: %v, want INVALID_RECORD", err)
	}
	if err := cl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("keyed produce: %v", err)
	}
	if end := endOffsets(t, adm, topic)[0]; end != 1 {
		t.Fatalf("end offset %d, want 1 (only the keyed record stored)", end)
	}
}
