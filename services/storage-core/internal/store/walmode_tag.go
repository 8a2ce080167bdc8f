//go:build walmode

package store

// forceWAL: built with -tags walmode, every Store without an fsync interval opens in
// WAL mode, so the whole test suite runs against it (go test -tags walmode ./...).
const forceWAL = true
