package store

import (
	"os"
	"syscall"
)

// fallocKeepSize is FALLOC_FL_KEEP_SIZE: allocate blocks without changing the file
// size, so a segment never shows a zero tail.
const fallocKeepSize = 0x1

// withFd runs fn on f's descriptor, holding a reference so a concurrent Close cannot
// recycle it.
func withFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// preallocate reserves disk blocks for [off, off+n) beyond the end of f. On ext4,
// appends into preallocated blocks are many times cheaper than extending writes (no
// block allocation per write). Errors are ignored: it is only an optimization.
func preallocate(f *os.File, off, n int64) {
	_ = withFd(f, func(fd int) error { return syscall.Fallocate(fd, fallocKeepSize, off, n) })
}

// datasync flushes f's data and the metadata needed to read it back (fdatasync(2)).
func datasync(f *os.File) error {
	return withFd(f, syscall.Fdatasync)
}

// dropCache tells the kernel the clean pages of [off, off+n) of f are not needed
// (POSIX_FADV_DONTNEED).
func dropCache(f *os.File, off, n int64) {
	_ = withFd(f, func(fd int) error {
		_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), uintptr(off), uintptr(n), 4, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}

// willNeed asks the kernel to read [off, off+n) of f into the page cache in the
// background (POSIX_FADV_WILLNEED). Errors (e.g. f closed meanwhile) are ignored.
func willNeed(f *os.File, off, n int64) {
	_ = withFd(f, func(fd int) error {
		_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), uintptr(off), uintptr(n), 3, 0, 0)
		if e != 0 {
			return e
		}
		return nil
	})
}
