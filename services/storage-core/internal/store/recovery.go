package store

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
)

// validFrameAfter looks for an intact batch anywhere in f after the bad batch at
// byte pos (file size size): a v2 header with a sane length, record count = last
// offset delta + 1, base offset >= next (the offset expected at pos) and within 2^31
// of it, and a matching CRC-32C. It returns that batch's position. Start-up recovery
// truncates only a torn tail; an intact batch after the damage means data in the
// middle of the segment is corrupt, and truncating would drop acknowledged data.
//
// A crash can also persist later pages of unacknowledged writes but not earlier
// ones; that too is reported (the channel is fenced rather than silently cut).
func validFrameAfter(f *os.File, pos, size, next int64) (int64, bool) {
	const window = 1 << 20
	buf := make([]byte, window+batchHeaderLen)
	var frame []byte
	for start := pos + 1; start+batchHeaderLen <= size; start += window {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-start)], start)
		if err != nil && err != io.EOF {
			return 0, false
		}
		b := buf[:n]
		for i := 0; i+batchHeaderLen <= len(b) && i < window; i++ {
			if b[i+offMagic] != 2 {
				continue
			}
			h := parseHeader(b[i:])
			cand := start + int64(i)
			if h.Length < batchHeaderLen || cand+int64(h.Length) > size || h.RecordCount <= 0 ||
				h.LastOffsetDelta != h.RecordCount-1 || h.BaseOffset < next || h.BaseOffset-next > 1<<31 {
				continue
			}
			if cap(frame) < int(h.Length) {
				frame = make([]byte, h.Length)
			}
			frame = frame[:h.Length]
			if _, err := f.ReadAt(frame, cand); err != nil {
				continue
			}
			if crc32.Checksum(frame[offAttributes:], castagnoli) == binary.BigEndian.Uint32(frame[offCRC:]) {
				return cand, true
			}
		}
	}
	return 0, false
}
