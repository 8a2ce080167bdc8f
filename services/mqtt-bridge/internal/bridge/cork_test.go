package bridge

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// readWrites reads from c (the far end of a net.Pipe, where each Read returns the
// bytes of one Write at most) until it has n bytes, and returns them with the number
// of writes they came in.
func readWrites(t *testing.T, c net.Conn, n int) ([]byte, int) {
	t.Helper()
	var got []byte
	writes := 0
	buf := make([]byte, 1<<20)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < n {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:k]...)
		writes++
	}
	return got, writes
}

// Writes to a corked connection leave together, in order, at uncork; uncorked, each
// write goes through at once.
func TestCorkConnHoldsWritesUntilUncork(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &corkConn{Conn: a}
	c.cork()
	var want []byte
	for i := range 20 {
		p := []byte{0x40, 0x02, 0x00, byte(i)} // a PUBACK
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("corked write: %d %v", n, err)
		}
		want = append(want, p...)
	}
	done := make(chan struct{})
	go func() { c.uncork(); close(done) }()
	got, writes := readWrites(t, b, len(want))
	<-done
	if !bytes.Equal(got, want) || writes != 1 {
		t.Fatalf("got %x in %d writes, want %x in 1", got, writes, want)
	}
	// Uncorked: written at once.
	go func() { _, _ = c.Write([]byte("x")) }()
	if got, _ := readWrites(t, b, 1); string(got) != "x" {
		t.Fatalf("uncorked write: %q", got)
	}
	// Uncorking with nothing held writes nothing.
	c.cork()
	c.uncork()
	go func() { _, _ = c.Write([]byte("y")) }()
	if got, writes := readWrites(t, b, 1); string(got) != "y" || writes != 1 {
		t.Fatalf("after an empty cork: %q in %d writes", got, writes)
	}
}

// A corked connection writes what it holds once it holds corkLimit bytes, without
// waiting for uncork.
func TestCorkConnWritesPastLimit(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &corkConn{Conn: a}
	c.cork()
	p := bytes.Repeat([]byte{7}, corkLimit/2)
	go func() {
		_, _ = c.Write(p)
		_, _ = c.Write(p) // reaches the limit: written while still corked
	}()
	if got, writes := readWrites(t, b, corkLimit); len(got) != corkLimit || writes != 1 {
		t.Fatalf("got %d bytes in %d writes, want %d in 1", len(got), writes, corkLimit)
	}
}

// A failed write of the held bytes closes the connection, and every later write fails.
func TestCorkConnFailedFlushCloses(t *testing.T) {
	a, b := net.Pipe()
	c := &corkConn{Conn: a}
	c.cork()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = b.Close() // the peer is gone: the write at uncork fails
	c.uncork()
	if _, err := c.Write([]byte("later")); err == nil || !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after a failed flush: %v, want the flush's error", err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("connection not closed after a failed flush: %v", err)
	}
}

// Closing a corked connection writes what it holds first.
func TestCorkConnCloseWritesHeld(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	c := &corkConn{Conn: a}
	c.cork()
	if _, err := c.Write([]byte("disconnect")); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Close() }()
	if got, _ := readWrites(t, b, len("disconnect")); string(got) != "disconnect" {
		t.Fatalf("got %q before the close", got)
	}
	if _, err := b.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the held bytes: %v, want EOF", err)
	}
}

// Closing a connection whose write is stuck (the peer does not read) ends that write
// at once, as closing the connection itself does.
func TestCorkConnCloseDuringStuckWrite(t *testing.T) {
	a, b := net.Pipe() // nothing reads b: a write on a blocks
	defer b.Close()
	c := &corkConn{Conn: a}
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("stuck"))
		wrote <- err
	}()
	time.Sleep(50 * time.Millisecond) // the write is blocked now, holding c.mu
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for a stuck write")
	}
	if err := <-wrote; !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("stuck write ended with %v, want the close", err)
	}
}
