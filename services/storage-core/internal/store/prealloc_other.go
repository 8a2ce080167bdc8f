//go:build !linux

package store

import "os"

func preallocate(*os.File, int64, int64) {}

func datasync(f *os.File) error { return f.Sync() }

func dropCache(*os.File, int64, int64) {}

func willNeed(*os.File, int64, int64) {}
