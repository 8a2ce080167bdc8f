package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestAppendFrameRange: a frame whose records all lie in the range, or a compressed
// one, is appended as it is; an uncompressed one is cut down to the records in the
// range, a valid batch (CRC, length, count) with its base offset and the kept records'
// offsets and values as stored; a frame whose stored CRC is wrong is refused
// (ErrDataLoss), not given a fresh CRC.
func TestAppendFrameRange(t *testing.T) {
	frame := kbatch(t, batchOpt{}, "v0", "v1", "v2", "v3", "v4")
	binary.BigEndian.PutUint64(frame, 100) // base offset 100: offsets 100..104
	binary.BigEndian.PutUint32(frame[offCRC:], crc32.Checksum(frame[offAttributes:], castagnoli))
	got := func(b []byte) []string {
		t.Helper()
		if crc32.Checksum(b[offAttributes:], castagnoli) != binary.BigEndian.Uint32(b[offCRC:]) {
			t.Fatal("CRC of the result does not match")
		}
		if n, _ := frameLen(b); n != len(b) {
			t.Fatalf("batch length %d for %d bytes", n, len(b))
		}
		recs, err := DecodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, fmt.Sprintf("%d=%s", r.Offset, r.Value))
		}
		return out
	}
	prefix := []byte("kept")
	for _, c := range []struct {
		first, last int64
		want        []string
	}{
		{100, 104, []string{"100=v0", "101=v1", "102=v2", "103=v3", "104=v4"}},
		{90, 200, []string{"100=v0", "101=v1", "102=v2", "103=v3", "104=v4"}},
		{100, 101, []string{"100=v0", "101=v1"}},
		{102, 103, []string{"102=v2", "103=v3"}},
		{104, 104, []string{"104=v4"}},
	} {
		out, err := AppendFrameRange(append([]byte(nil), prefix...), frame, c.first, c.last)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(out, prefix) {
			t.Fatalf("%d..%d: dst's bytes not kept", c.first, c.last)
		}
		if g := got(out[len(prefix):]); !slices.Equal(g, c.want) {
			t.Errorf("%d..%d: %v, want %v", c.first, c.last, g, c.want)
		}
		if c.first <= 100 && c.last >= 104 && !bytes.Equal(out[len(prefix):], frame) {
			t.Errorf("%d..%d: the whole frame was not appended as it is", c.first, c.last)
		}
	}
	// In place: the frame at dst's end moves down over itself.
	buf := append(append([]byte(nil), prefix...), frame...)
	out, err := AppendFrameRange(buf[:len(prefix)], buf[len(prefix):], 103, 104)
	if err != nil {
		t.Fatal(err)
	}
	if g := got(out[len(prefix):]); !slices.Equal(g, []string{"103=v3", "104=v4"}) {
		t.Errorf("in place: %v", g)
	}

	compressed := kbatch(t, batchOpt{codec: kgo.SnappyCompression()}, "c0", "c1", "c2")
	if parseHeader(compressed).Attributes&attrCompressionMask == 0 {
		t.Fatal("the compressed batch is not")
	}
	if out, err := AppendFrameRange(nil, compressed, 1, 1); err != nil || !bytes.Equal(out, compressed) {
		t.Errorf("compressed frame: %v, changed %v", err, !bytes.Equal(out, compressed))
	}

	bad := append([]byte(nil), frame...)
	bad[len(bad)-1] ^= 0xff
	if out, err := AppendFrameRange(prefix, bad, 100, 101); !errors.Is(err, ErrDataLoss) || !bytes.Equal(out, prefix) {
		t.Errorf("damaged frame: %v, %q", err, out)
	}
}
