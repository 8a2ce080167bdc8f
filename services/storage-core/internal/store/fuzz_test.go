package store

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzDecodeBatch: arbitrary bytes never panic the frame checks or the decoder.
func FuzzDecodeBatch(f *testing.F) {
	t := &testing.T{}
	f.Add(kbatch(t, batchOpt{}, "a", "b"))
	for _, c := range []kgo.CompressionCodec{kgo.GzipCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression()} {
		f.Add(kbatch(t, batchOpt{codec: c}, "a", "b", "c"))
	}
	f.Add(EncodeBatch([]NewRecord{{Key: []byte("k"), Headers: []Header{{Key: "h"}}}}, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := frameLen(b); err == nil {
			_, _ = checkFrame(b[:n], decompressLimit(DefaultMaxMessageBytes))
		}
		_, _ = DecodeBatch(b)
	})
}
