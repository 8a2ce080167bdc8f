package store

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// TestHeaderKeyNotUTF8: a header key that is not UTF-8 is decoded with U+FFFD for its
// bad bytes (every decoded record goes out as proto strings), repeated keys in a batch
// too, while the stored frame (what Kafka Fetch serves) keeps the bytes as sent.
func TestHeaderKeyNotUTF8(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	defer s.Close()
	l := mustCreate(t, s, "hk", ChannelConfig{})
	b := EncodeBatch([]NewRecord{
		{Value: []byte("a"), Headers: []Header{{Key: "ok"}, {Key: "x\xff\xfey", Value: []byte("v")}, {Key: "\xc3"}}},
		{Value: []byte("b"), Headers: []Header{{Key: "x\xff\xfey"}}},
	}, 1000)
	mustAppend(t, l, bytes.Clone(b))
	recs := readAll(t, l, 0)
	if len(recs) != 2 {
		t.Fatalf("read %d records, want 2", len(recs))
	}
	want := [][]string{{"ok", "x\uFFFDy", "\uFFFD"}, {"x\uFFFDy"}}
	for i, r := range recs {
		if len(r.Headers) != len(want[i]) {
			t.Fatalf("record %d: %d headers, want %d", i, len(r.Headers), len(want[i]))
		}
		for j, h := range r.Headers {
			if h.Key != want[i][j] || !utf8.ValidString(h.Key) {
				t.Errorf("record %d header %d key %q, want %q", i, j, h.Key, want[i][j])
			}
		}
	}
	raw, err := l.ReadRaw(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte("x\xff\xfey")) {
		t.Errorf("stored frame lost the header key's bytes as sent")
	}
}
