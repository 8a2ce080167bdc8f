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
		key, tp, p, ok := ParseKafkaSharePartition(got)
		if !ok || key != KafkaShareGroupKey(c.group) || tp != c.topic || p != c.part {
			t.Fatalf("ParseKafkaSharePartition(%q) = %q %q %d %v", got, key, tp, p, ok)
		}
	}
	// Any group id Kafka accepts names a queue within MaxNameLen: up to 122 bytes by
	// its hex, longer ones by their SHA-256, and no two ids (hex or hashed) alike.
	longestTopic := strings.Repeat("t", MaxTopicNameLen)
	keys := map[string]string{}
	for _, n := range []int{maxHexShareGroupLen, maxHexShareGroupLen + 1, 255, 32767} {
		for _, g := range []string{strings.Repeat("g", n), strings.Repeat("g", n-1) + "h"} {
			name, err := KafkaSharePartition(g, longestTopic, 255)
			if err != nil || len(name) > MaxNameLen {
				t.Fatalf("%d-byte group id: %d-byte name, %v", n, len(name), err)
			}
			if ValidateStored(name) != nil {
				t.Fatalf("%d-byte group id: ValidateStored(%q) refused", n, name)
			}
			key, tp, p, ok := ParseKafkaSharePartition(name)
			if !ok || key != KafkaShareGroupKey(g) || tp != longestTopic || p != 255 {
				t.Fatalf("ParseKafkaSharePartition(%q) = %q %q %d %v", name, key, tp, p, ok)
			}
			if hashed := strings.HasPrefix(key, "sha256-"); hashed != (n > maxHexShareGroupLen) {
				t.Fatalf("%d-byte group id: key %q", n, key)
			}
			if other, dup := keys[key]; dup {
				t.Fatalf("group ids of %d and %d bytes share key %q", len(other), len(g), key)
			}
			keys[key] = g
		}
	}
	for _, c := range []struct {
		group, topic string
		part         int32
		want         error
	}{
		{"", "t", 0, ErrInvalidName},
		{"g", "a~b", 0, ErrInvalidTopic},
		{"g", "t", -1, ErrInvalidPartition},
		{"g", "t", 256, ErrInvalidPartition},
	} {
		if _, err := KafkaSharePartition(c.group, c.topic, c.part); !errors.Is(err, c.want) {
			t.Fatalf("KafkaSharePartition(%q, %q, %d): %v, want %v", c.group, c.topic, c.part, err, c.want)
		}
	}
	for _, bad := range []string{"kafka.t", "_KAFKA_share.", "_KAFKA_share.67", "_KAFKA_share.6.t", "_KAFKA_share.6G.t", "_KAFKA_share.67.t~0", "_KAFKA_share.67.a~b~c", "_KAFKA_share.6A.t", "_KAFKA_share.sha256-ab.t", "_KAFKA_share.sha256-" + strings.Repeat("A", 64) + ".t", "_KAFKA_share." + strings.Repeat("67", maxHexShareGroupLen+1) + ".t"} {
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
