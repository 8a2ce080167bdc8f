package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one service process of a stack. It keeps its command line, so it can be
// killed and started again on the same ports and data directory.
type Proc struct {
	// Name identifies the process in a stack: "storage-core", "coordinator",
	// "kafka-gateway-<node id>".
	Name string
	// HTTPAddr serves /healthz, /readyz and /metrics.
	HTTPAddr string
	// LogPath receives the process's stdout and stderr (appended across restarts).
	LogPath string
	// DataDir is a storage-core process's --data-dir ("" for the other services).
	DataDir string

	bin  string
	args []string
	env  []string // added to the environment

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed when the current process has exited
	waitErr  error
	signaled bool // we sent a signal to the current process
	crashes  []string
}

func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		// flagenv falls back to TRIBUTARY_<SERVICE>_<FLAG>; keep the caller's environment
		// from changing what the stack runs.
		if strings.HasPrefix(kv, "TRIBUTARY_") && !strings.HasPrefix(kv, "TRIBUTARY_TEST_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// start launches the process. It is an error to start a process that is running.
func (p *Proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: already running (pid %d)", p.Name, p.cmd.Process.Pid)
		}
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== e2e %s: start %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(childEnv(), p.env...)
	// The kernel kills the child if the test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.waitErr, p.signaled = cmd, done, nil, false
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		if !p.signaled {
			p.crashes = append(p.crashes, fmt.Sprintf("%s (pid %d) exited by itself: %v", p.Name, cmd.Process.Pid, err))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process is up.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Pid is the process id of the current (or last) process, 0 if never started.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the process. Not running is not an error.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	p.signaled = true
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: signal %v: %w", p.Name, sig, err)
	}
	return nil
}

// Wait waits up to timeout for the process to exit and returns how it exited (nil for
// status 0). After timeout it is killed with SIGKILL and an error says so.
func (p *Proc) Wait(timeout time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-time.After(timeout):
		_ = p.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("%s: did not exit within %v; killed", p.Name, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Stop sends SIGTERM and waits up to timeout (then SIGKILL). It returns a non-nil
// error when the process did not exit cleanly with status 0.
func (p *Proc) Stop(timeout time.Duration) error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if err := p.Wait(timeout); err != nil {
		return fmt.Errorf("%s: stop: %w", p.Name, err)
	}
	return nil
}

// Crashes lists exits the stack did not cause (the process died by itself).
func (p *Proc) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.crashes...)
}

// waitReady polls GET /readyz until it answers 200, the process exits, or ctx ends.
func (p *Proc) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + p.HTTPAddr + "/readyz"
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(body.String()))
		} else {
			last = err.Error()
		}
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			p.mu.Lock()
			err := p.waitErr
			p.mu.Unlock()
			return fmt.Errorf("%s exited before ready: %v\n%s", p.Name, err, Tail(p.LogPath, 40))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (last: %s): %w\n%s", p.Name, url, last, ctx.Err(), Tail(p.LogPath, 40))
		case <-tick.C:
		}
	}
}

// Tail returns the last n lines of the file at path (or a note why it cannot).
func Tail(path string, n int) string { return tailFrom(path, 0, n) }

// tailFrom returns the last n lines of the file at path from byte offset from on.
func tailFrom(path string, from int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	if from > 0 && from <= int64(len(b)) {
		b = b[from:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// CPUTime is the user+system CPU time process pid has used (/proc/<pid>/stat, in
// clock ticks of 10 ms); 0 when it cannot be read. CPU per message varies far less
// than messages per second on a shared machine, so it shows what a change costs.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at state (field 3);
	// utime and stime are fields 14 and 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// FetchProfile writes the body of url (a /debug/pprof/ endpoint of a process, which
// answers after its profile window) to path; a status other than 200 is an error.
func FetchProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
