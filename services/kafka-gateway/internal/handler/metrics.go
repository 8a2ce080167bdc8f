package handler

import (
	"reflect"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Metrics are the gateway's Prometheus metrics:
//
//	tributary_kafka_requests_total{api}                  requests answered, per API
//	tributary_kafka_errors_total{api,code}               error codes in responses (per
//	                                                    partition / topic / resource)
//	tributary_kafka_request_duration_seconds{api}        handling latency
//	tributary_kafka_produce_bytes_total                  record batch bytes produced
//	tributary_kafka_fetch_bytes_total                    record batch bytes fetched
type Metrics struct {
	requests     *prometheus.CounterVec
	errors       *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	produceBytes prometheus.Counter
	fetchBytes   prometheus.Counter
}

// NewMetrics registers the gateway metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_kafka_requests_total", Help: "Kafka requests answered, by API.",
		}, []string{"api"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_kafka_errors_total", Help: "Kafka error codes returned, by API and code (per partition, topic or resource).",
		}, []string{"api", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tributary_kafka_request_duration_seconds", Help: "Kafka request handling time, by API.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"api"}),
		produceBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_kafka_produce_bytes_total", Help: "Record batch bytes received in Produce requests.",
		}),
		fetchBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tributary_kafka_fetch_bytes_total", Help: "Record batch bytes sent in Fetch responses.",
		}),
	}
	reg.MustRegister(m.requests, m.errors, m.latency, m.produceBytes, m.fetchBytes)
	return m
}

func (m *Metrics) observe(key int16, resp kmsg.Response, d time.Duration) {
	if m == nil {
		return
	}
	name := kmsg.NameForKey(key)
	m.requests.WithLabelValues(name).Inc()
	m.latency.WithLabelValues(name).Observe(d.Seconds())
	if resp == nil {
		return
	}
	countErrors(reflect.ValueOf(resp), func(code int16) {
		m.errors.WithLabelValues(name, strconv.Itoa(int(code))).Inc()
	})
}

func (m *Metrics) addProduceBytes(n int) {
	if m != nil {
		m.produceBytes.Add(float64(n))
	}
}

func (m *Metrics) addFetchBytes(n int) {
	if m != nil {
		m.fetchBytes.Add(float64(n))
	}
}

// countErrors walks a kmsg response and calls fn for every non-zero ErrorCode field.
func countErrors(v reflect.Value, fn func(int16)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			countErrors(v.Elem(), fn)
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				if c := int16(f.Int()); c != 0 {
					fn(c)
				}
				continue
			}
			if f.Kind() == reflect.Slice || f.Kind() == reflect.Struct {
				countErrors(f, fn)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return
		}
		for i := 0; i < v.Len(); i++ {
			countErrors(v.Index(i), fn)
		}
	}
}
