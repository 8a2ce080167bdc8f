package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

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

// Connection timeouts.
const (
	// IdleTimeout closes a connection that sends no request for this long (Kafka's
	// connections.max.idle.ms default, 10 minutes).
	IdleTimeout = 10 * time.Minute
	// BodyProgressTimeout closes a connection whose request body stops arriving: each
	// chunk of a frame's body must arrive within it.
	BodyProgressTimeout = 30 * time.Second
	// bodyChunk is how much of a body is read, and reserved in the memory budget, at a
	// time.
	bodyChunk = 1 << 20
)

// deadliner is the part of net.Conn readBody needs; nil disables deadlines (tests).
type deadliner interface{ SetReadDeadline(time.Time) error }

// readBody reads the n bytes of a frame after its size, in chunks. Memory is reserved
// in mem (and the buffer grown) only as bytes actually arrive, so a client that
// announces a large frame and then stalls holds only what it sent, and is cut off after
// BodyProgressTimeout without progress (or without memory budget for the next chunk).
// It returns the bytes reserved, which the caller
// releases (also on error).
func readBody(ctx context.Context, r io.Reader, d deadliner, mem *budget, n int32) (buf []byte, reserved int64, err error) {
	buf = make([]byte, 0, min(int(n), bodyChunk))
	for len(buf) < int(n) {
		chunk := min(int(n)-len(buf), bodyChunk)
		// Bounded wait: connections that each hold part of the budget and wait for
		// more would otherwise wait for each other forever.
		actx, cancel := context.WithTimeout(ctx, BodyProgressTimeout)
		err := mem.acquire(actx, int64(chunk))
		cancel()
		if err != nil {
			return nil, reserved, fmt.Errorf("request memory budget: %w", err)
		}
		reserved += int64(chunk)
		if d != nil {
			_ = d.SetReadDeadline(time.Now().Add(BodyProgressTimeout))
		}
		buf = slices.Grow(buf, chunk)
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+chunk]); err != nil {
			return nil, reserved, err
		}
		buf = buf[:len(buf)+chunk]
	}
	return buf, reserved, nil
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
