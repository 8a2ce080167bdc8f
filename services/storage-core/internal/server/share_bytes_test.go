package server

import "testing"

// TestShareFetchBytes: a ShareFetch without a byte limit (0), or with one past what an
// answer can carry on the bus, acquires at most maxShareFetchBytes, so its answer
// always fits in one gRPC message; other limits pass through.
func TestShareFetchBytes(t *testing.T) {
	for in, want := range map[int64]int64{
		0:                      maxShareFetchBytes,
		1 << 40:                maxShareFetchBytes,
		maxShareFetchBytes + 1: maxShareFetchBytes,
		maxShareFetchBytes:     maxShareFetchBytes,
		1:                      1,
		4096:                   4096,
	} {
		if got := shareFetchBytes(in); got != want {
			t.Errorf("shareFetchBytes(%d) = %d, want %d", in, got, want)
		}
	}
}
