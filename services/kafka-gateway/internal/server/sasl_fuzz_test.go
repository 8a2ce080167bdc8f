package server

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tributary/tributary/services/kafka-gateway/internal/sasl"
)

// reqFrame encodes req as a request frame (header v1, or v2 for flexible versions).
func reqFrame(req kmsg.Request, version int16, corr int32) []byte {
	req.SetVersion(version)
	b := []byte{0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "fuzz"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func handshake(mech string, v int16, corr int32) []byte {
	r := kmsg.NewPtrSASLHandshakeRequest()
	r.Mechanism = mech
	return reqFrame(r, v, corr)
}

func authenticate(msg string, v int16, corr int32) []byte {
	r := kmsg.NewPtrSASLAuthenticateRequest()
	r.SASLAuthBytes = []byte(msg)
	return reqFrame(r, v, corr)
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// saslSeeds are the hostile conversations of issue 19 (and good ones to mutate from).
func saslSeeds() [][]byte {
	md := reqFrame(kmsg.NewPtrMetadataRequest(), 1, 9)
	good := cat(handshake(sasl.MechPlain, 1, 1), authenticate("\x00alice\x00alice-secret", 1, 2), md)
	return [][]byte{
		md, // a frame before SaslHandshake
		good,
		good[:len(good)-5], // truncated
		cat(handshake(sasl.MechPlain, 1, 1), []byte{0x7f, 0xff, 0xff, 0xff, 0, 36}), // oversize frame
		handshake("GSSAPI", 1, 1), // wrong mechanism
		cat(handshake(sasl.MechPlain, 1, 1), handshake(sasl.MechPlain, 1, 2)), // handshake twice
		authenticate("\x00alice\x00alice-secret", 1, 1),                       // authenticate first
		cat(handshake(sasl.ScramSHA256, 1, 1), authenticate("n,,n=alice,r=abc", 1, 2), // replayed nonce
			authenticate("c=biws,r=abc,p=dGVzdA==", 1, 3)),
		cat(handshake(sasl.ScramSHA512, 2-1, 1), authenticate("garbage", 2, 2)),
		cat(handshake(sasl.MechPlain, 0, 1), []byte{0, 0, 0, 3}, []byte("\x00\x00\x00")), // v0 bare token
		cat(handshake(sasl.MechOAuthBearer, 1, 1), authenticate("n,,\x01auth=Bearer x.y.\x01\x01", 1, 2), authenticate("\x01", 1, 3)),
		cat(good, handshake(sasl.MechPlain, 0, 10)), // v0 re-handshake after authentication
		{0, 0, 0, 2, 0, 17},
		{},
	}
}

// fuzzGateway is the gateway every fuzz input runs against, and an authenticated
// connection kept open across inputs: it must stay served throughout.
type fuzzGateway struct {
	s       *secureStack
	bystand net.Conn
	br      *bufio.Reader
	corr    int32
}

func newFuzzGateway(t testing.TB) *fuzzGateway {
	s := startSecure(t, func(c *Config) { c.OAuthBearerUnsecured = true })
	c, err := net.Dial("tcp", s.srv.ListenerAddr("SASL_PLAINTEXT"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	g := &fuzzGateway{s: s, bystand: c, br: bufio.NewReader(c)}
	if _, err := c.Write(cat(handshake(sasl.MechPlain, 1, 1), authenticate("\x00bob\x00bob-secret", 1, 2))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := g.readFrame(); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func (g *fuzzGateway) readFrame() error {
	_ = g.bystand.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(g.br, size[:]); err != nil {
		return err
	}
	_, err := io.CopyN(io.Discard, g.br, int64(binary.BigEndian.Uint32(size[:])))
	return err
}

// check: the bystander connection is still served.
func (g *fuzzGateway) check(t testing.TB) {
	g.corr++
	if _, err := g.bystand.Write(reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, g.corr)); err != nil {
		t.Fatalf("bystander write: %v", err)
	}
	if err := g.readFrame(); err != nil {
		t.Fatalf("bystander no longer served: %v", err)
	}
}

// send writes data to listener, half-closes, and requires the server to end the
// connection (after whatever answers) within 10 s: no hang, no crash.
func (g *fuzzGateway) send(t testing.TB, listener string, data []byte) {
	c, err := net.Dial("tcp", g.s.srv.ListenerAddr(listener))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(data); err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("write %x: timed out", data)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, err = io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: connection still open 10 s after input %x", listener, data)
	}
}

// FuzzSASLConversation sends arbitrary bytes to a SASL_PLAINTEXT listener: every
// input ends with the connection closed, no crash, and another authenticated client
// is served all along.
func FuzzSASLConversation(f *testing.F) {
	for _, s := range saslSeeds() {
		f.Add(s)
	}
	g := newFuzzGateway(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		g.send(t, "SASL_PLAINTEXT", data)
		g.check(t)
	})
}

// FuzzTLSHandshake sends arbitrary bytes to a SASL_SSL listener in place of a TLS
// handshake (and Kafka frames in clear): the handshake fails, the connection closes.
func FuzzTLSHandshake(f *testing.F) {
	f.Add(reqFrame(kmsg.NewPtrApiVersionsRequest(), 3, 1))
	f.Add([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc}) // a truncated ClientHello
	f.Add([]byte{0x16, 0x03, 0x03, 0xff, 0xff})                         // an oversize record
	f.Add([]byte{})
	g := newFuzzGateway(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		g.send(t, "SASL_SSL", data)
		g.check(t)
	})
}

// TestSASLAndTLSHostileInputs runs the seeds and 400 random mutations of them against
// both listeners (what the fuzz targets do under go test -fuzz), then checks a TLS
// client still authenticates.
func TestSASLAndTLSHostileInputs(t *testing.T) {
	g := newFuzzGateway(t)
	rng := rand.New(rand.NewSource(19))
	seeds := saslSeeds()
	for _, s := range seeds {
		g.send(t, "SASL_PLAINTEXT", s)
		g.send(t, "SASL_SSL", s)
	}
	for i := range 400 {
		d := append([]byte(nil), seeds[rng.Intn(len(seeds))]...)
		switch i % 4 {
		case 0: // flip bytes
			for range 1 + rng.Intn(4) {
				if len(d) > 0 {
					d[rng.Intn(len(d))] ^= byte(1 + rng.Intn(255))
				}
			}
		case 1: // truncate
			if len(d) > 0 {
				d = d[:rng.Intn(len(d))]
			}
		case 2: // splice random bytes in
			junk := make([]byte, rng.Intn(32))
			rng.Read(junk)
			at := 0
			if len(d) > 0 {
				at = rng.Intn(len(d))
			}
			d = append(d[:at:at], append(junk, d[at:]...)...)
		case 3: // concatenate two seeds
			d = append(d, seeds[rng.Intn(len(seeds))]...)
		}
		g.send(t, "SASL_PLAINTEXT", d)
		if i%8 == 0 {
			g.send(t, "SASL_SSL", d)
		}
		g.check(t)
	}
	// A TLS client still authenticates.
	c, err := tls.Dial("tcp", g.s.srv.ListenerAddr("SASL_SSL"), g.s.tlsConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(cat(handshake(sasl.MechPlain, 1, 1), authenticate("\x00alice\x00alice-secret", 1, 2))); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for range 2 {
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); err != nil {
			t.Fatalf("TLS client after the hostile inputs: %v", err)
		}
		buf := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatal(err)
		}
		if binary.BigEndian.Uint32(buf) == 2 {
			ar := kmsg.NewPtrSASLAuthenticateResponse()
			ar.Version = 1
			if err := ar.ReadFrom(buf[4:]); err != nil || ar.ErrorCode != 0 {
				t.Fatalf("TLS authentication after the hostile inputs: %v %d", err, ar.ErrorCode)
			}
		}
	}
}
