// Package diskio holds the file syscalls storage-core's write paths share.
package diskio

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data, and the metadata needed to read it back, to the device
// (fdatasync(2)); the file's size counts, its times do not. Errors: the syscall's
// (EIO, ENOSPC, ...), or f's when it is closed.
func Fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = syscall.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
