package bridge

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the bridge's counters, each labelled by mapping id.
type metrics struct {
	sent, stored, failed, tooLarge *prometheus.CounterVec
	storeLatency                   *prometheus.CounterVec
	polled, published, invalid     *prometheus.CounterVec
	refused, deduplicated          *prometheus.CounterVec
	held                           prometheus.Gauge
	// byMapping caches each mapping's children of the counters a record moves on the
	// way to storage (mapping id → *mappingMetrics): looking a child up by its label
	// (hashing, a lock) for every message cost more than counting it.
	byMapping sync.Map
}

// mappingMetrics are one mqtt-to-kafka mapping's store counters.
type mappingMetrics struct {
	sent, stored, failed, deduplicated, storeLatency prometheus.Counter
}

// mapping returns the store counters of mapping id.
func (m *metrics) mapping(id string) *mappingMetrics {
	if mm, ok := m.byMapping.Load(id); ok {
		return mm.(*mappingMetrics)
	}
	mm, _ := m.byMapping.LoadOrStore(id, &mappingMetrics{
		sent:         m.sent.WithLabelValues(id),
		stored:       m.stored.WithLabelValues(id),
		failed:       m.failed.WithLabelValues(id),
		deduplicated: m.deduplicated.WithLabelValues(id),
		storeLatency: m.storeLatency.WithLabelValues(id),
	})
	return mm.(*mappingMetrics)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tributary_mqtt_" + name, Help: help}, []string{"mapping"})
		reg.MustRegister(v)
		return v
	}
	m := &metrics{
		sent:         c("sent_total", "mqtt-to-kafka: records sent to storage-core."),
		stored:       c("stored_total", "mqtt-to-kafka: records storage-core acknowledged as durable."),
		failed:       c("failed_total", "mqtt-to-kafka: appends that failed or timed out (each retried upstream, refused with 0x97 on the listener)."),
		tooLarge:     c("too_large_total", "mqtt-to-kafka: messages over max-record-bytes (0x83 on the listener, dropped and acknowledged upstream)."),
		storeLatency: c("store_latency_seconds_sum", "mqtt-to-kafka: total seconds from receipt to durable, over stored records."),
		polled:       c("polled_total", "kafka-to-mqtt: records read from Kafka topics."),
		published:    c("published_total", "kafka-to-mqtt: MQTT messages the MQTT side accepted."),
		invalid:      c("invalid_total", "kafka-to-mqtt: records skipped because they make an invalid or $ MQTT topic."),
		refused:      c("refused_total", "listener: QoS 1/2 publishes answered with a refusal (or, for MQTT 3.1.1, acknowledged although not stored)."),
		deduplicated: c("deduplicated_total", "mqtt-to-kafka: records not appended again because an earlier append of the same message was found stored (a listener publisher's retry after 0x97, a listener session's resend after a reconnection or restart, an upstream retry)."),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tributary_mqtt_held_acks", Help: "QoS 1/2 acknowledgements held back now until storage-core has the message.",
		}),
	}
	reg.MustRegister(m.held)
	return m
}
