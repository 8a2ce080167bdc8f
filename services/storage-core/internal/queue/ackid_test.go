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
		checkAckIDPaths(t, s)
		a, ok := parseAckID(s)
		if ok {
			if b, ok2 := parseAckID(a.String()); !ok2 || b != a {
				t.Fatalf("%q -> %+v does not round-trip", s, a)
			}
		}
	})
}

// TestAckIDHexPath: the strconv-free path accepts only what the general path accepts,
// with the same values.
func TestAckIDHexPath(t *testing.T) {
	for _, s := range []string{"1.2.3", "0.0.0", "ABC.def.0", "ffffffffffffffff.7fffffffffffffff.ffffffffffffffff",
		"0000000000000001.2.3", "00000000000000001.2.3", "1.8000000000000000.3", "1.+2.3", "1.-0.3", "1.2.3.", ".1.2", "1.2.g"} {
		checkAckIDPaths(t, s)
	}
}

func checkAckIDPaths(t *testing.T, s string) {
	t.Helper()
	a, ok := parseAckIDHex(s)
	b, okb := parseAckIDStrconv(s)
	if ok && (!okb || a != b) {
		t.Fatalf("%q: hex path %+v, general path %+v %v", s, a, b, okb)
	}
}
