// Package wiretest holds the helpers the tests of the by-reference storage codecs
// (proto/storagewire and the services' wrappers around it) share: cutting an encoding
// into transport-sized frames, and telling a view of a buffer from a copy. Only tests
// import it.
package wiretest

import (
	"unsafe"

	"google.golang.org/grpc/mem"
)

// Split cuts b into pieces of at most n bytes (n > 0), as the transport's frames do;
// the pieces are views of b.
func Split(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return out
}

// Within reports whether sub lies in buf's memory (a view of buf, not a copy).
func Within(buf, sub []byte) bool {
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(sub))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= lo && p+uintptr(len(sub)) <= lo+uintptr(len(buf))
}
