package murmur2

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Vectors from Apache Kafka's UtilsTest.testMurmur2 (shared/REFERENCE.md).
func TestSum32KafkaVectors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := int32(Sum32([]byte(tc.in))); got != tc.want {
			t.Errorf("murmur2(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestPartition(t *testing.T) {
	// toPositive(-973932308) = 1173551340, and 1173551340 % 7 = 3.
	if got := Partition([]byte("21"), 7); got != 3 {
		t.Errorf("Partition(21, 7) = %d", got)
	}
	for n := int32(1); n <= 256; n++ {
		if p := Partition([]byte("foobar"), n); p < 0 || p >= n {
			t.Fatalf("Partition(foobar, %d) = %d, out of range", n, p)
		}
	}
	if got, want := Partition([]byte("abc"), 10), int32(479470107%10); got != want {
		t.Errorf("Partition(abc, 10) = %d, want %d", got, want)
	}
}
