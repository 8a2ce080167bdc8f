package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// maxDecompressedBytes bounds what one stored batch may decompress to when read (the
// append-time bound, decompressLimit, is at most this).
const maxDecompressedBytes = 256 << 20

// decompressLimit is how many bytes one batch of a channel with max_message_bytes m
// may decompress to at append: 32 × m, at least 64 MiB, at most maxDecompressedBytes.
// A producer can send a small batch that expands enormously (zstd of repeated bytes:
// over 1000x); real data compresses far less than 32x at batch sizes near m, and the
// 64 MiB floor keeps small-m channels usable. Batches over it are CORRUPT_BATCH.
func decompressLimit(m int32) int {
	return min(max(64<<20, 32*int(m)), maxDecompressedBytes)
}

// decBufPool holds decompression buffers for append-time validation (*[]byte);
// buffers over maxPooledBuf are dropped instead of kept.
var decBufPool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledBuf = 8 << 20

func getDecBuf() *[]byte { return decBufPool.Get().(*[]byte) }

func putDecBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		*b = nil
	}
	decBufPool.Put(b)
}

// Pooled streaming decoders for append-time validation. zstd decoders run
// synchronously (concurrency 1), so a pooled one owns no goroutine.
var (
	gzipPool sync.Pool // *gzip.Reader
	lz4Pool  = sync.Pool{New: func() any { return lz4.NewReader(nil) }}
	zstdPool sync.Pool // *zstd.Decoder
)

// decompressInto decompresses src (a compressed records section) into dst[:0],
// growing it as needed, and fails when the output exceeds limit bytes or the data is
// not valid for codec. The returned slice may be a reallocation of dst.
func decompressInto(dst, src []byte, codec int16, limit int) ([]byte, error) {
	dst = dst[:0]
	switch codec {
	case codecGzip:
		var zr *gzip.Reader
		var err error
		if v := gzipPool.Get(); v != nil {
			zr = v.(*gzip.Reader)
			err = zr.Reset(bytes.NewReader(src))
		} else {
			zr, err = gzip.NewReader(bytes.NewReader(src))
		}
		if err != nil {
			return dst, err
		}
		defer gzipPool.Put(zr)
		return readInto(dst, zr, limit)
	case codecSnappy:
		if bytes.HasPrefix(src, xerialMagic) && len(src) >= 16 {
			return xerialDecodeInto(dst, src[16:], limit)
		}
		return snappyBlockInto(dst, src, limit)
	case codecLz4:
		zr := lz4Pool.Get().(*lz4.Reader)
		defer lz4Pool.Put(zr)
		zr.Reset(bytes.NewReader(src))
		return readInto(dst, zr, limit)
	case codecZstd:
		var zr *zstd.Decoder
		if v := zstdPool.Get(); v != nil {
			zr = v.(*zstd.Decoder)
			if err := zr.Reset(bytes.NewReader(src)); err != nil {
				return dst, err
			}
		} else {
			var err error
			zr, err = zstd.NewReader(bytes.NewReader(src), zstd.WithDecoderConcurrency(1),
				zstd.WithDecoderMaxMemory(maxDecompressedBytes), zstd.WithDecoderLowmem(true))
			if err != nil {
				return dst, err
			}
		}
		out, err := readInto(dst, zr, limit)
		_ = zr.Reset(nil)
		zstdPool.Put(zr)
		return out, err
	}
	return dst, fmt.Errorf("%w: codec %d", ErrUnsupportedCompression, codec)
}

// readInto reads r to EOF into dst (appending), failing past limit bytes.
func readInto(dst []byte, r io.Reader, limit int) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, min(max(len(dst), 64<<10), limit+1-len(dst)))
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), limit+1)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, fmt.Errorf("decompresses to more than %d bytes", limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

func snappyBlockInto(dst, block []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return dst, err
	}
	if n < 0 || len(dst)+n > limit {
		return dst, fmt.Errorf("decompresses to more than %d bytes", limit)
	}
	dst = slices.Grow(dst, n)
	out, err := snappy.Decode(dst[len(dst):len(dst)+n], block)
	if err != nil {
		return dst, err
	}
	return dst[:len(dst)+len(out)], nil
}

func xerialDecodeInto(dst, p []byte, limit int) ([]byte, error) {
	for len(p) > 0 {
		if len(p) < 4 {
			return dst, fmt.Errorf("xerial: short block header")
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return dst, fmt.Errorf("xerial: block of %d bytes past the end", n)
		}
		var err error
		if dst, err = snappyBlockInto(dst, p[:n], limit); err != nil {
			return dst, err
		}
		p = p[n:]
	}
	return dst, nil
}

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
