package server

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// readBody returns exactly the body and reserves exactly its size; a body cut short
// has reserved at most about twice what arrived.
func TestReadBody(t *testing.T) {
	for _, n := range []int{10, 4096, bodyChunk, bodyChunk + 1, 6*bodyChunk + 3, 9 * bodyChunk} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 31)
		}
		mem := newBudget(1 << 30)
		got, reserved, err := readBody(context.Background(), bytes.NewReader(want), nil, mem, int32(n), nil, n)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("n=%d: err %v, body equal %v", n, err, bytes.Equal(got, want))
		}
		if reserved != int64(n) || mem.used != int64(n) || cap(got) != n {
			t.Errorf("n=%d: reserved %d, budget used %d, cap %d", n, reserved, mem.used, cap(got))
		}

		sent := n / 3
		mem = newBudget(1 << 30)
		_, reserved, err = readBody(context.Background(), bytes.NewReader(want[:sent]), nil, mem, int32(n), nil, n)
		if err == nil || err != io.ErrUnexpectedEOF && err != io.EOF {
			t.Fatalf("n=%d cut at %d: err %v", n, sent, err)
		}
		if limit := max(int64(bodyChunk), 2*int64(sent)+bodyChunk); reserved > limit || mem.used != reserved {
			t.Errorf("n=%d cut at %d: reserved %d (limit %d), budget used %d", n, sent, reserved, limit, mem.used)
		}
	}
}

// Produce bodies grow to their class size, go back to the pool, and are read into
// directly next time.
func TestBodyPool(t *testing.T) {
	var p bodyPool
	for _, n := range []int{40 << 10, 1_000_100, bodyChunk, 6*bodyChunk + 5} {
		want := bytes.Repeat([]byte{byte(n)}, n)
		if p.get(n) != nil {
			t.Fatalf("n=%d: empty pool returned a buffer", n)
		}
		mem := newBudget(1 << 30)
		b, reserved, err := readBody(context.Background(), bytes.NewReader(want), nil, mem, int32(n), nil, p.capFor(n))
		if err != nil || !bytes.Equal(b, want) || reserved != int64(n) {
			t.Fatalf("n=%d: err %v, reserved %d", n, err, reserved)
		}
		if cap(b) != p.capFor(n) || cap(b) < n || cap(b) >= 2*max(n, 64<<10) {
			t.Fatalf("n=%d: cap %d, class %d", n, cap(b), p.capFor(n))
		}
		var into []byte
		for i := 0; i < 50 && into == nil; i++ { // sync.Pool drops some Puts under -race
			p.put(b)
			into = p.get(n)
		}
		if into == nil || cap(into) != cap(b) {
			t.Fatalf("n=%d: pooled buffer not returned", n)
		}
		want[0]++
		b2, _, err := readBody(context.Background(), bytes.NewReader(want), nil, newBudget(1<<30), int32(n), into, p.capFor(n))
		if err != nil || !bytes.Equal(b2, want) || &b2[0] != &into[:1][0] {
			t.Fatalf("n=%d: read into the pooled buffer: %v", n, err)
		}
	}
	// Small and foreign buffers are not pooled.
	p.put(make([]byte, 100))
	p.put(make([]byte, 0, 70<<10))
	if p.get(100) != nil || p.get(70<<10) != nil {
		t.Error("pooled a small or odd-sized buffer")
	}
}
