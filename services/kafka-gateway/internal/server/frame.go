package server

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// readSize reads a frame's int32 size and checks it against max bytes.
func readSize(r io.Reader, sizeBuf []byte, max int32) (int32, error) {
	if _, err := io.ReadFull(r, sizeBuf[:4]); err != nil {
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(sizeBuf[:4]))
	if n < 0 || n > max {
		return 0, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, max)
	}
	if n < 10 {
		return 0, fmt.Errorf("%w: %d-byte frame is shorter than a request header", ErrBadFrame, n)
	}
	return n, nil
}

// readBody reads the n bytes of a frame after its size.
func readBody(r io.Reader, n int32) ([]byte, error) {
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// header is a parsed request header (v1, or v2 for flexible requests).
type header struct {
	key           int16
	version       int16
	correlationID int32
	clientID      *string
}

// parseHeader parses the fixed part of a request header: api key, version, correlation
// id and the (never compact) nullable client id. It returns the rest of the frame.
func parseHeader(b []byte) (header, []byte, error) {
	var h header
	if len(b) < 10 {
		return h, nil, fmt.Errorf("%w: %d-byte header", ErrBadFrame, len(b))
	}
	h.key = int16(binary.BigEndian.Uint16(b[0:]))
	h.version = int16(binary.BigEndian.Uint16(b[2:]))
	h.correlationID = int32(binary.BigEndian.Uint32(b[4:]))
	l := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	switch {
	case l == -1:
	case l < -1 || int(l) > len(b):
		return h, nil, fmt.Errorf("%w: client id length %d", ErrBadFrame, l)
	default:
		s := string(b[:l])
		h.clientID = &s
		b = b[l:]
	}
	return h, b, nil
}

// skipTags skips a tagged-fields section (flexible header v2).
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: tagged fields", ErrBadFrame)
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		_, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: tag", ErrBadFrame)
		}
		b = b[k:]
		sz, k := binary.Uvarint(b)
		if k <= 0 || sz > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: tag size", ErrBadFrame)
		}
		b = b[k+int(sz):]
	}
	return b, nil
}

// encodeResponse frames resp for correlation id corr: size, correlation id, the tagged
// fields of response header v1 when the response is flexible (never for ApiVersions,
// whose response header is always v0), then the body at resp's version.
func encodeResponse(buf []byte, corr int32, resp kmsg.Response) []byte {
	buf = append(buf[:0], 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}
