package server

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tributary/tributary/libs/tlsx"
	"github.com/tributary/tributary/libs/tlsx/tlsxtest"
)

// countingConn counts the writes of the socket under the server's TLS connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestTLSWriterCoalescesRecords: a 1 MiB response written through responseWriter
// reaches the client intact in 4 socket writes (256 KiB each) instead of one per
// 16 KiB TLS record, and writes outside it (the handshake) go straight through.
func TestTLSWriterCoalescesRecords(t *testing.T) {
	ca := tlsxtest.NewCA(t)
	cert, key := ca.Issue(t, "gw", "kafka-gateway")
	srvCfg, err := tlsx.Server{CertFile: cert, KeyFile: key}.Config()
	if err != nil {
		t.Fatal(err)
	}
	cliCfg, err := tlsx.Client{CAFile: ca.CertFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	cliCfg.ServerName = "localhost"
	a, b := net.Pipe()
	deadline := time.Now().Add(30 * time.Second)
	_ = a.SetDeadline(deadline)
	_ = b.SetDeadline(deadline)
	counted := &countingConn{Conn: a}
	srv := tls.Server(&coalescingConn{Conn: counted}, srvCfg)
	cli := tls.Client(b, cliCfg)
	defer srv.Close()
	defer cli.Close()

	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(cli, buf); err != nil {
			t.Error(err)
		}
		got <- buf
	}()
	if err := srv.Handshake(); err != nil {
		t.Fatal(err)
	}
	before := counted.writes.Load()
	if before == 0 {
		t.Fatal("handshake wrote nothing to the socket")
	}
	if n, err := responseWriter(srv).Write(want); err != nil || n != len(want) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if !bytes.Equal(<-got, want) {
		t.Fatal("the client read other bytes than were written")
	}
	if n := counted.writes.Load() - before; n != 4 {
		t.Fatalf("1 MiB took %d socket writes, want 4 (64 TLS records held 16 at a time)", n)
	}
	if w, ok := responseWriter(counted).(*countingConn); !ok || w != counted {
		t.Fatal("a plain connection's responses must be written to it directly")
	}
}
