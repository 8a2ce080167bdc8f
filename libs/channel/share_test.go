package channel

import (
	"errors"
	"strings"
	"testing"
)

func TestKafkaSharePartition(t *testing.T) {
	for _, c := range []struct {
		group, topic string
		part         int32
		want         string
	}{
		{"g", "orders", 0, "_KAFKA_share.67.orders"},
		{"g", "orders", 7, "_KAFKA_share.67.orders~7"},
		{"my group/ü.x", "a.b-c_d", 255, "_KAFKA_share.6d792067726f75702fc3bc2e78.a.b-c_d~255"},
	} {
		got, err := KafkaSharePartition(c.group, c.topic, c.part)
		if err != nil || got != c.want {
			t.Fatalf("KafkaSharePartition(%q, %q, %d) = %q, %v; want %q", c.group, c.topic, c.part, got, err, c.want)
		}
		if !strings.HasPrefix(got, KafkaShareGroupPrefix(c.group)) || !IsReserved(got) {
			t.Fatalf("%q: not under the group prefix or not reserved", got)
		}
		g, tp, p, ok := ParseKafkaSharePartition(got)
		if !ok || g != c.group || tp != c.topic || p != c.part {
			t.Fatalf("ParseKafkaSharePartition(%q) = %q %q %d %v", got, g, tp, p, ok)
		}
	}
	long := strings.Repeat("g", MaxShareGroupIDLen)
	name, err := KafkaSharePartition(long, strings.Repeat("t", MaxTopicNameLen), 255)
	if err != nil || len(name) > MaxNameLen {
		t.Fatalf("longest names: %d bytes, %v", len(name), err)
	}
	for _, c := range []struct {
		group, topic string
		part         int32
		want         error
	}{
		{"", "t", 0, ErrInvalidName},
		{long + "g", "t", 0, ErrInvalidName},
		{"g", "a~b", 0, ErrInvalidTopic},
		{"g", "t", -1, ErrInvalidPartition},
		{"g", "t", 256, ErrInvalidPartition},
	} {
		if _, err := KafkaSharePartition(c.group, c.topic, c.part); !errors.Is(err, c.want) {
			t.Fatalf("KafkaSharePartition(%q, %q, %d): %v, want %v", c.group, c.topic, c.part, err, c.want)
		}
	}
	for _, bad := range []string{"kafka.t", "_KAFKA_share.", "_KAFKA_share.67", "_KAFKA_share.6.t", "_KAFKA_share.6G.t", "_KAFKA_share.67.t~0", "_KAFKA_share.67.a~b~c", "_KAFKA_share.6A.t"} {
		if _, _, _, ok := ParseKafkaSharePartition(bad); ok {
			t.Fatalf("ParseKafkaSharePartition(%q) accepted", bad)
		}
	}
}

func TestValidateStored(t *testing.T) {
	name, _ := KafkaSharePartition("g", "t", 3)
	if err := ValidateStored(name); err != nil {
		t.Fatalf("ValidateStored(%q): %v", name, err)
	}
	if err := Validate(name); !errors.Is(err, ErrReserved) {
		t.Fatalf("Validate(%q) = %v, want ErrReserved", name, err)
	}
	for _, bad := range []string{"_KAFKA_share.zz.t", "_other", ""} {
		if ValidateStored(bad) == nil {
			t.Fatalf("ValidateStored(%q) accepted", bad)
		}
	}
}
