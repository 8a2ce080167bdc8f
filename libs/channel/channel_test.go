package channel

import (
	"errors"
	"strings"
	"testing"
)

func TestKafkaRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		topic string
		part  int32
		want  string
	}{
		{"orders", 0, "kafka.orders"},
		{"orders", 1, "kafka.orders~1"},
		{"a.b_c-d", 255, "kafka.a.b_c-d~255"},
	} {
		got := KafkaPartition(tc.topic, tc.part)
		if got != tc.want {
			t.Fatalf("KafkaPartition(%q,%d) = %q, want %q", tc.topic, tc.part, got, tc.want)
		}
		topic, part, ok := ParseKafka(got)
		if !ok || topic != tc.topic || part != tc.part {
			t.Fatalf("ParseKafka(%q) = %q,%d,%v", got, topic, part, ok)
		}
		if err := Validate(got); err != nil {
			t.Fatalf("Validate(%q): %v", got, err)
		}
		if !strings.HasPrefix(got, KafkaPrefix) {
			t.Fatalf("%q does not start with KafkaPrefix %q", got, KafkaPrefix)
		}
	}
}

func TestParseKafkaRejects(t *testing.T) {
	for _, name := range []string{"kafka.", "kafka.t~0", "kafka.t~01", "kafka.t~256", "kafka.t~x", "kafka.a~1~2", "gcp.t", "kafka..", "kafka.t~-1"} {
		if _, _, ok := ParseKafka(name); ok {
			t.Errorf("ParseKafka(%q) accepted", name)
		}
	}
}

func TestValidateKafkaTopic(t *testing.T) {
	good := []string{"a", "orders", "A-b_c.d", strings.Repeat("x", 249), "_internal", "__consumer_offsets"}
	bad := []string{"", ".", "..", "a~b", strings.Repeat("x", 250), "a b", "ä", "a/b"}
	for _, n := range good {
		if err := ValidateKafkaTopic(n); err != nil {
			t.Errorf("ValidateKafkaTopic(%q): %v", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateKafkaTopic(n); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("ValidateKafkaTopic(%q) = %v, want ErrInvalidTopic", n, err)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := Validate("_TRIBUTARY_x"); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved: %v", err)
	}
	for _, n := range []string{"", "a b", "gcp.", "gcp.sub.", "kafka.x~0", strings.Repeat("a", 513)} {
		if err := Validate(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Validate(%q) = %v, want ErrInvalidName", n, err)
		}
	}
	for _, n := range []string{"events", "gcp.orders", "gcp.sub.s1", "kafka._x", "kafka.t~7"} {
		if err := Validate(n); err != nil {
			t.Errorf("Validate(%q): %v", n, err)
		}
	}
	if PubSubTopic("t") != "gcp.t" || PubSubSubscription("s") != "gcp.sub.s" {
		t.Fatal("pubsub names")
	}
}

func TestPubSubNames(t *testing.T) {
	for _, tc := range []struct {
		id    string
		sub   bool
		want  string
		valid bool
	}{
		{"orders", false, "gcp.orders", true},
		{"a-b_c.d~e+f%g", false, "gcp.a-b_c.d~e+f%g", true},
		{"orders", true, "gcp.sub.orders", true},
		{"sub.x", true, "gcp.sub.sub.x", true},
	} {
		got := PubSubTopic(tc.id)
		if tc.sub {
			got = PubSubSubscription(tc.id)
		}
		if got != tc.want {
			t.Fatalf("name of %q = %q, want %q", tc.id, got, tc.want)
		}
		id, sub, ok := ParsePubSub(got)
		if !ok || id != tc.id || sub != tc.sub {
			t.Fatalf("ParsePubSub(%q) = %q,%v,%v", got, id, sub, ok)
		}
		if err := Validate(got); err != nil {
			t.Fatalf("Validate(%q): %v", got, err)
		}
	}
	for _, id := range []string{"", "ab", "1abc", "googthing", "Goog-x", "a b c", "abc/d", "abc#", strings.Repeat("a", 256)} {
		if err := ValidatePubSubID(id); !errors.Is(err, ErrInvalidPubSubID) {
			t.Errorf("ValidatePubSubID(%q) = %v", id, err)
		}
	}
	if err := ValidatePubSubTopicID("sub.orders"); !errors.Is(err, ErrInvalidPubSubID) {
		t.Errorf("topic id sub.orders accepted: %v", err)
	}
	if err := Validate("kafka.a+b"); err == nil {
		t.Error("kafka.a+b accepted")
	}
}

// Kafka offsets start at 0 where sequences start at 1, and the conversions invert each
// other.
func TestOffsetSequence(t *testing.T) {
	for _, c := range []struct{ off, seq int64 }{{0, 1}, {-1, 0}, {41, 42}, {1<<62 - 1, 1 << 62}} {
		if got := OffsetToSequence(c.off); got != c.seq {
			t.Errorf("OffsetToSequence(%d) = %d, want %d", c.off, got, c.seq)
		}
		if got := SequenceToOffset(c.seq); got != c.off {
			t.Errorf("SequenceToOffset(%d) = %d, want %d", c.seq, got, c.off)
		}
	}
}

func TestKafkaInternalTopics(t *testing.T) {
	a, b := KafkaInternalTopicID("c1", "__consumer_offsets"), KafkaInternalTopicID("c1", "__transaction_state")
	if a == b || a != KafkaInternalTopicID("c1", "__consumer_offsets") || a == KafkaInternalTopicID("c2", "__consumer_offsets") {
		t.Errorf("ids not stable per cluster and name: %x %x", a, b)
	}
	if a[6]>>4 != 4 || a[8]>>6 != 2 {
		t.Errorf("id %x is not laid out as a UUID v4", a)
	}
	if _, ok := KafkaInternal("__consumer_offsets"); !ok {
		t.Error("__consumer_offsets is not internal")
	}
	if _, ok := KafkaInternal("orders"); ok {
		t.Error("orders is internal")
	}
}
