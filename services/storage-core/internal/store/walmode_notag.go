//go:build !walmode

package store

// forceWAL is false in normal builds: WAL mode only by Options.WAL (--wal).
const forceWAL = false
