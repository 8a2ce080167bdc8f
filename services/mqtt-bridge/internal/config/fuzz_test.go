package config

import "testing"

// FuzzLoad: no input makes Load panic; every problem it reports is well formed.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("headers: [1, {a: [b]}]\n"))
	f.Add([]byte("mqtt-to-kafka: [{headers: {x: y}, key: '${', qos: 9}]\n"))
	f.Add([]byte("kafka-to-mqtt: [{mqtt-topic: [[1]], properties: {user-properties: [x]}}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("clusters: &x [*x]\nlistener: &y {tls: *y}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, ps := Load(data, func(string) (string, bool) { return "", false })
		for _, p := range ps {
			if p.Msg == "" {
				t.Fatalf("problem without a message: %+v", p)
			}
		}
	})
}
