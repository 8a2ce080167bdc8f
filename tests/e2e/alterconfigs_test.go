package e2e

import (
	"bytes"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicOverrides returns the configs topic sets itself (DYNAMIC_TOPIC_CONFIG), read with
// DescribeConfigs.
func topicOverrides(t *testing.T, adm *kadm.Client, topic string) map[string]string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctxT(t, 20*time.Second), topic)
	if err != nil {
		t.Fatalf("DescribeConfigs %s: %v", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("DescribeConfigs %s: %v %v", topic, err, rc.Err)
	}
	out := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			out[c.Key] = c.MaybeValue()
		}
	}
	return out
}

// TestAlterConfigs drives the non-incremental AlterConfigs (API key 33) with the two
// clients that still send it, kadm's AlterTopicConfigsState and Sarama's
// ClusterAdmin.AlterConfig (at each request version): the configs given become the
// topic's whole set, in force on storage-core too; validate_only and refused values
// change nothing.
func TestAlterConfigs(t *testing.T) {
	s := sharedStack(t)
	adm := newAdmin(t, s.KafkaAddrs)
	cl := newClient(t, s.KafkaAddrs, kgo.ProducerBatchCompression(kgo.NoCompression())) // so 4 KiB stay 4 KiB
	big := bytes.Repeat([]byte("x"), 4096)
	produceBig := func(topic string) error {
		return cl.ProduceSync(ctxT(t, 20*time.Second), &kgo.Record{Topic: topic, Value: big}).FirstErr()
	}

	t.Run("kadm", func(t *testing.T) {
		topic := topicName("alterstate")
		createTopic(t, adm, topic, 1, map[string]*string{"retention.ms": kadm.StringPtr("100000"), "cleanup.policy": kadm.StringPtr("compact,delete")})
		before := map[string]string{"retention.ms": "100000", "cleanup.policy": "compact,delete"}
		state := []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("1024")}, {Name: "retention.ms", Value: kadm.StringPtr("200000")}}

		rs, err := adm.ValidateAlterTopicConfigsState(ctxT(t, 20*time.Second), state, topic)
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("validate only: %v %+v", err, rs)
		}
		if got := topicOverrides(t, adm, topic); !maps.Equal(got, before) {
			t.Fatalf("validate only changed the configs: %v, want %v", got, before)
		}

		rs, err = adm.AlterTopicConfigsState(ctxT(t, 20*time.Second), state, topic)
		if err != nil || len(rs) != 1 || rs[0].Err != nil {
			t.Fatalf("AlterTopicConfigsState: %v %+v", err, rs)
		}
		if got, want := topicOverrides(t, adm, topic), map[string]string{"max.message.bytes": "1024", "retention.ms": "200000"}; !maps.Equal(got, want) {
			t.Fatalf("after AlterTopicConfigsState: %v, want %v (cleanup.policy back to its default)", got, want)
		}
		if err := produceBig(topic); !errors.Is(err, kerr.MessageTooLarge) {
			t.Fatalf("4 KiB record with max.message.bytes 1024: %v, want MESSAGE_TOO_LARGE", err)
		}

		for _, tc := range []struct {
			name  string
			state []kadm.AlterConfig
			want  error
		}{
			{"bad value", []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("-5")}}, kerr.InvalidConfig},
			{"unknown config", []kadm.AlterConfig{{Name: "no.such.config", Value: kadm.StringPtr("1")}}, kerr.InvalidConfig},
			{"null value", []kadm.AlterConfig{{Name: "retention.ms"}}, kerr.InvalidRequest},
			{"config twice", []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("1")}, {Name: "retention.ms", Value: kadm.StringPtr("2")}}, kerr.InvalidRequest},
		} {
			rs, err := adm.AlterTopicConfigsState(ctxT(t, 20*time.Second), tc.state, topic)
			if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, tc.want) {
				t.Errorf("%s: %v %+v, want %v", tc.name, err, rs, tc.want)
			}
		}
		rs, err = adm.AlterTopicConfigsState(ctxT(t, 20*time.Second), state[:1], topicName("missing"))
		if err != nil || len(rs) != 1 || !errors.Is(rs[0].Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("unknown topic: %v %+v, want UNKNOWN_TOPIC_OR_PARTITION", err, rs)
		}
		if got, want := topicOverrides(t, adm, topic), map[string]string{"max.message.bytes": "1024", "retention.ms": "200000"}; !maps.Equal(got, want) {
			t.Fatalf("refused alters changed the configs: %v, want %v", got, want)
		}
	})

	for _, v := range []struct {
		name    string
		version sarama.KafkaVersion
	}{{"sarama-v0", sarama.V0_11_0_0}, {"sarama-v1", sarama.V2_1_0_0}, {"sarama-v2", sarama.V2_8_0_0}} {
		t.Run(v.name, func(t *testing.T) {
			conf := sarama.NewConfig()
			conf.Version = v.version
			conf.ClientID = "e2e-" + v.name
			sa, err := sarama.NewClusterAdmin(s.KafkaAddrs, conf)
			if err != nil {
				t.Fatalf("sarama.NewClusterAdmin: %v", err)
			}
			defer func() { _ = sa.Close() }()

			topic := topicName("alterconfig")
			createTopic(t, adm, topic, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("1024"), "retention.ms": kadm.StringPtr("100000")})
			before := map[string]string{"max.message.bytes": "1024", "retention.ms": "100000"}
			if err := produceBig(topic); !errors.Is(err, kerr.MessageTooLarge) {
				t.Fatalf("4 KiB record with max.message.bytes 1024: %v, want MESSAGE_TOO_LARGE", err)
			}

			entries := map[string]*string{"retention.ms": kadm.StringPtr("300000"), "retention.bytes": kadm.StringPtr("10485760")}
			if err := sa.AlterConfig(sarama.TopicResource, topic, entries, true); err != nil {
				t.Fatalf("validate only: %v", err)
			}
			if got := topicOverrides(t, adm, topic); !maps.Equal(got, before) {
				t.Fatalf("validate only changed the configs: %v, want %v", got, before)
			}

			if err := sa.AlterConfig(sarama.TopicResource, topic, map[string]*string{"segment.ms": kadm.StringPtr("0")}, false); !errors.Is(err, sarama.ErrInvalidConfig) {
				t.Errorf("segment.ms 0: %v, want INVALID_CONFIG", err)
			}
			if err := sa.AlterConfig(sarama.TopicResource, topic, map[string]*string{"retention.ms": nil}, false); !errors.Is(err, sarama.ErrInvalidRequest) {
				t.Errorf("null value: %v, want INVALID_REQUEST", err)
			}
			if err := sa.AlterConfig(sarama.TopicResource, topicName("missing"), entries, false); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				t.Errorf("unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
			}
			if got := topicOverrides(t, adm, topic); !maps.Equal(got, before) {
				t.Fatalf("refused alters changed the configs: %v, want %v", got, before)
			}

			if err := sa.AlterConfig(sarama.TopicResource, topic, entries, false); err != nil {
				t.Fatalf("AlterConfig: %v", err)
			}
			if got, want := topicOverrides(t, adm, topic), map[string]string{"retention.ms": "300000", "retention.bytes": "10485760"}; !maps.Equal(got, want) {
				t.Fatalf("after AlterConfig: %v, want %v (max.message.bytes back to its default)", got, want)
			}
			if err := produceBig(topic); err != nil {
				t.Fatalf("4 KiB record once max.message.bytes is back to its default: %v", err)
			}
		})
	}
}
