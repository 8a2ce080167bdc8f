package server

import (
	"context"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	topics   prometheus.Gauge
	notified *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_coordinator_requests_total",
			Help: "CoordinatorService calls by method and gRPC status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tributary_coordinator_request_duration_seconds",
			Help:    "CoordinatorService call latency in seconds, by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}, []string{"method"}),
		topics: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tributary_coordinator_topics",
			Help: "Kafka topics registered (refreshed after each change and every 30 s).",
		}),
		notified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_coordinator_topic_notifications_total",
			Help: "topics.changed announcements on NATS, by result (ok, error).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.topics, m.notified)
	return m
}

// interceptor counts and times every unary call.
func (m *metrics) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	method := path.Base(info.FullMethod)
	m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}
