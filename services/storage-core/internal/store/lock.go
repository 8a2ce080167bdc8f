package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// lockDataDir takes the exclusive flock on <dir>/LOCK and writes this process's pid
// into it (for the error another process reports). The kernel releases a flock when
// its holder dies, but only once the process is fully torn down, which after kill -9
// can take a while (an fsync in progress finishes first); so while the lock is held
// it retries every 20 ms for up to wait (0 = 10 s, < 0 = once) before failing with
// the holder's pid.
func lockDataDir(dir string, wait time.Duration, log *zap.Logger) (*os.File, error) {
	if wait == 0 {
		wait = 10 * time.Second
	}
	path := filepath.Join(dir, "LOCK")
	lf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(wait)
	logged := false
	for {
		err = syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || !time.Now().Before(deadline) {
			holder, _ := os.ReadFile(path)
			_ = lf.Close()
			return nil, fmt.Errorf("data dir %s is in use by another process (pid %s in LOCK): %w",
				dir, strings.TrimSpace(string(holder)), err)
		}
		if !logged {
			log.Warn("data dir lock is held; waiting for the holder to exit", zap.String("dir", dir), zap.Duration("max_wait", wait))
			logged = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lf.Truncate(0); err == nil {
		_, _ = lf.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return lf, nil
}
