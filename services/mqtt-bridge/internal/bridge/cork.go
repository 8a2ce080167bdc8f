package bridge

import (
	"net"
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"
)

// corkLimit is how many bytes a corked connection holds before it writes them anyway,
// and keptCork the largest buffer it keeps between runs (a run of acknowledgements
// takes a few bytes each), in bytes.
const (
	corkLimit = 64 << 10
	keptCork  = 4 << 10
)

// corkConn is a listener connection whose writes can be held back and sent together
// (TCP_CORK in user space): a client's flow corks it while it answers a run of
// publishes whose outcome is known already, so that their acknowledgements leave in
// one write (one syscall, one TLS record) instead of one each. Whatever else is written
// meanwhile (deliveries, PINGRESP) joins the held bytes in order. The flow uncorks it
// before it waits for anything, so an answer is never held while the bridge waits.
// Its reads go through frames (see Read).
type corkConn struct {
	net.Conn

	mu     sync.Mutex
	corked bool
	held   []byte
	err    error // the write error that ended the connection

	// frames checks what the client sends (nil: nothing is checked); read only in
	// the library's read loop, like disconnect and readErr.
	frames *frames
	// disconnect ends the connection of a connected MQTT 5 client with a DISCONNECT
	// (set by storeHook.OnConnect).
	disconnect func(packets.Code)
	// readErr is the protocol error that ends the connection, once frames found it;
	// refused is set once the client was told.
	readErr *protocolError
	refused bool
	// forget, when set, is called on Close (the CONNECT guard forgets the connection).
	forget func()
}

// Read reads what the client sends, through frames. Once a packet breaks the
// protocol, the bytes before it are passed on, then the client is told (CONNACK or
// DISCONNECT with the reason code, MQTT 5 section 4.13; nothing for MQTT 3.1.1, which
// has no code for it) and the read fails with the protocolError, which ends the
// connection (and sends the Will, section 3.1.2.5).
func (c *corkConn) Read(b []byte) (int, error) {
	if c.frames == nil {
		return c.Conn.Read(b)
	}
	if c.readErr != nil {
		c.refuse()
		return 0, c.readErr
	}
	n, err := c.Conn.Read(b)
	k, code, bad := c.frames.scan(b[:n])
	if !bad {
		return n, err
	}
	c.readErr = &protocolError{code: code}
	if k > 0 {
		return k, nil // the packets before it first; the next read fails
	}
	c.refuse()
	return 0, c.readErr
}

// refuse tells an MQTT 5 client why its connection ends: in a CONNACK when its
// CONNECT broke the protocol, else in a DISCONNECT, written after what the library
// wrote before. It does so once.
func (c *corkConn) refuse() {
	if c.refused || c.frames.version != 5 {
		return
	}
	c.refused = true
	rc := packets.ErrMalformedPacket
	switch c.readErr.code {
	case codeProtocolError:
		rc = packets.ErrProtocolViolation
	case codePacketTooLarge:
		rc = packets.ErrPacketTooLarge
	case codeBadAuthMethod:
		rc = packets.ErrBadAuthenticationMethod
	}
	if c.disconnect != nil {
		c.disconnect(rc)
		return
	}
	_, _ = c.Write([]byte{packets.Connack << 4, 3, 0, rc.Code, 0})
}

// Write writes b, or holds a copy of it while c is corked (reporting it written: a
// failure shows when the held bytes are written, which closes the connection).
func (c *corkConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if !c.corked {
		return c.Conn.Write(b)
	}
	c.held = append(c.held, b...)
	if len(c.held) >= corkLimit {
		c.flushLocked()
	}
	return len(b), nil
}

// cork holds writes until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork writes what was held and lets writes through again.
func (c *corkConn) uncork() {
	c.mu.Lock()
	c.corked = false
	c.flushLocked()
	c.mu.Unlock()
}

// Close calls forget, writes what is held (a DISCONNECT the library wrote just
// before, the answers before it), then closes the connection. A write in progress (a
// peer that does not read) is not waited for: the connection is closed under it,
// which ends it, as without the cork.
func (c *corkConn) Close() error {
	if c.forget != nil {
		c.forget()
	}
	if c.mu.TryLock() {
		c.corked = false
		c.flushLocked()
		c.mu.Unlock()
	}
	return c.Conn.Close()
}

// flushLocked writes the held bytes, c.mu held; a failure closes the connection (its
// reader then ends the client) and fails every later write.
func (c *corkConn) flushLocked() {
	if len(c.held) == 0 || c.err != nil {
		c.held = c.held[:0]
		return
	}
	_, err := c.Conn.Write(c.held)
	if cap(c.held) > keptCork {
		c.held = nil // a run of deliveries: not kept for the connection's life
	} else {
		c.held = c.held[:0]
	}
	if err != nil {
		c.err = err
		_ = c.Conn.Close()
	}
}

// rawConn is the connection under c (a *tls.Conn for a TLS listener).
func rawConn(c net.Conn) net.Conn {
	if cc, ok := c.(*corkConn); ok {
		return cc.Conn
	}
	return c
}
