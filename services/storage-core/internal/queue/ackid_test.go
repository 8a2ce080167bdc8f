package queue

import "testing"

func TestAckIDRoundTrip(t *testing.T) {
	for _, a := range []ackID{{}, {inc: 1<<63 - 1, off: 1<<63 - 1, lease: 1<<64 - 1}, {inc: 0xabc, off: 42, lease: 7}} {
		got, ok := parseAckID(a.String())
		if !ok || got != a {
			t.Fatalf("%+v -> %q -> %+v %v", a, a.String(), got, ok)
		}
	}
	for _, s := range []string{"", "1", "1.2", "1.2.3.4", "x.1.2", "1.-2.3", "1..3", "1.2.", string(make([]byte, 65))} {
		if _, ok := parseAckID(s); ok {
			t.Errorf("parseAckID(%q) accepted", s)
		}
	}
}

// FuzzParseAckID: any string either fails to parse or round-trips; never a panic.
func FuzzParseAckID(f *testing.F) {
	f.Add("1.2.3")
	f.Add("ffffffffffffffff.0.0")
	f.Fuzz(func(t *testing.T, s string) {
		a, ok := parseAckID(s)
		if ok {
			if b, ok2 := parseAckID(a.String()); !ok2 || b != a {
				t.Fatalf("%q -> %+v does not round-trip", s, a)
			}
		}
	})
}
