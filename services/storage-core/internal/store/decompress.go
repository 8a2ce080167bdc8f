package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// maxDecompressedBytes bounds what one batch may decompress to (a producer can send a
// small batch that expands enormously; only its CRC was checked at append).
const maxDecompressedBytes = 256 << 20

// Kafka compression codecs (RecordBatch attributes & 0x07).
const (
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

var (
	zstdOnce sync.Once
	zstdDec  *zstd.Decoder
	zstdErr  error
)

// xerialMagic starts snappy data framed by the Java client (snappy-java's xerial
// framing): magic, int32 version, int32 compatible version, then blocks of
// int32 length + raw snappy block. franz-go and librdkafka write raw snappy.
var xerialMagic = []byte{130, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decompress returns the records section of a compressed batch, decompressed, or an
// error for bad data or output over maxDecompressedBytes.
func decompress(src []byte, codec int16) ([]byte, error) {
	switch codec {
	case codecGzip:
		r, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, err
		}
		return readLimited(r)
	case codecSnappy:
		if bytes.HasPrefix(src, xerialMagic) && len(src) >= 16 {
			return xerialDecode(src[16:])
		}
		return snappyBlock(nil, src)
	case codecLz4:
		return readLimited(lz4.NewReader(bytes.NewReader(src)))
	case codecZstd:
		zstdOnce.Do(func() {
			zstdDec, zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
				zstd.WithDecoderMaxMemory(maxDecompressedBytes), zstd.WithDecoderLowmem(true))
		})
		if zstdErr != nil {
			return nil, zstdErr
		}
		return zstdDec.DecodeAll(src, nil)
	}
	return nil, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
}

func readLimited(r io.Reader) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, maxDecompressedBytes+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxDecompressedBytes {
		return nil, fmt.Errorf("decompresses to more than %d bytes", maxDecompressedBytes)
	}
	return out, nil
}

// snappyBlock appends the decoding of one raw snappy block to dst.
func snappyBlock(dst, block []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return nil, err
	}
	if n < 0 || len(dst)+n > maxDecompressedBytes {
		return nil, fmt.Errorf("decompresses to more than %d bytes", maxDecompressedBytes)
	}
	out, err := snappy.Decode(nil, block)
	if err != nil {
		return nil, err
	}
	if dst == nil {
		return out, nil
	}
	return append(dst, out...), nil
}

func xerialDecode(p []byte) ([]byte, error) {
	var out []byte
	for len(p) > 0 {
		if len(p) < 4 {
			return nil, fmt.Errorf("xerial: short block header")
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return nil, fmt.Errorf("xerial: block of %d bytes past the end", n)
		}
		var err error
		if out, err = snappyBlock(out, p[:n]); err != nil {
			return nil, err
		}
		p = p[n:]
	}
	return out, nil
}
