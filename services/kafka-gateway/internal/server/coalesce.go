package server

import (
	"crypto/tls"
	"net"
	"sync"
)

// maxCoalesced bounds the bytes of TLS records a connection holds before writing them
// out (16 records of 16 KiB): one write of the socket per 256 KiB of a large Fetch
// response instead of one per record.
const maxCoalesced = 256 << 10

// coalescingConn is the socket under a TLS connection. crypto/tls writes each record
// (at most 16 KiB of plaintext) with its own Write of the socket, so a 1 MiB Fetch
// response costs 64 write syscalls where PLAINTEXT costs one; while a tlsWriter's
// Write is in progress the records are gathered here and written together at its end.
// Writes outside one (the handshake, alerts, post-handshake messages) go straight
// through. mu orders every write of the socket, so a record written by another
// goroutine (crypto/tls answers a KeyUpdate from Read) never overtakes held ones.
type coalescingConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  *[]byte
}

// coalesceBufs recycles the held-records buffers (*[]byte, capacity maxCoalesced plus
// one record) between the writes of every connection.
var coalesceBufs = sync.Pool{New: func() any { b := make([]byte, 0, maxCoalesced+tlsRecordMax); return &b }}

// tlsRecordMax is the largest TLS record on the wire: 16 KiB of plaintext plus header,
// padding and AEAD overhead.
const tlsRecordMax = 16<<10 + 256

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold {
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = coalesceBufs.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= maxCoalesced {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flushLocked writes the held records; c.mu is held.
func (c *coalescingConn) flushLocked() error {
	if c.buf == nil || len(*c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(*c.buf)
	*c.buf = (*c.buf)[:0]
	return err
}

// tlsWriter writes to a TLS connection over a coalescingConn, one socket write per
// Write (or per maxCoalesced bytes of records).
type tlsWriter struct {
	tc  *tls.Conn
	raw *coalescingConn
}

func (w tlsWriter) Write(p []byte) (int, error) {
	w.raw.mu.Lock()
	w.raw.hold = true
	w.raw.mu.Unlock()
	n, err := w.tc.Write(p)
	w.raw.mu.Lock()
	defer w.raw.mu.Unlock()
	w.raw.hold = false
	if ferr := w.raw.flushLocked(); err == nil {
		err = ferr
	}
	if w.raw.buf != nil {
		coalesceBufs.Put(w.raw.buf)
		w.raw.buf = nil
	}
	return n, err
}

// responseWriter is where writeLoop writes c's responses: a tlsWriter for a TLS
// connection made by secure, c itself otherwise.
func responseWriter(c net.Conn) interface{ Write([]byte) (int, error) } {
	if tc, ok := c.(*tls.Conn); ok {
		if raw, ok := tc.NetConn().(*coalescingConn); ok {
			return tlsWriter{tc: tc, raw: raw}
		}
	}
	return c
}
