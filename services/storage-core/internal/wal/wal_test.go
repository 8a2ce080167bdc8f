package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waiter records what the writer reported.
type waiter struct {
	mu      sync.Mutex
	durable uint64
	err     error
	cond    *sync.Cond
}

func newWaiter() *waiter { w := &waiter{}; w.cond = sync.NewCond(&w.mu); return w }

func (w *waiter) Durable(lsn uint64) {
	w.mu.Lock()
	w.durable = max(w.durable, lsn)
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *waiter) Failed(err error) {
	w.mu.Lock()
	w.err = err
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *waiter) wait(lsn uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.durable < lsn && w.err == nil {
		w.cond.Wait()
	}
	return w.err
}

type replayed struct {
	ents map[uint64][]raftpb.Entry
	hs   map[uint64]raftpb.HardState
}

func open(t *testing.T, dir string, seg int64) (*WAL, *replayed, error) {
	t.Helper()
	r := &replayed{ents: map[uint64][]raftpb.Entry{}, hs: map[uint64]raftpb.HardState{}}
	w, err := Open(dir, Options{SegmentBytes: seg,
		ReplayEntry: func(g uint64, e *raftpb.Entry) error {
			c := *e
			c.Data = append([]byte(nil), e.Data...)
			r.ents[g] = append(r.ents[g], c)
			return nil
		},
		ReplayHardState: func(g uint64, hs raftpb.HardState) error { r.hs[g] = hs; return nil },
	}, zap.NewNop())
	return w, r, err
}

func data(g, i uint64) []byte { return []byte(fmt.Sprintf("group %d entry %d", g, i)) }

func mustAppend(t *testing.T, w *WAL, g, i uint64, wt *waiter) uint64 {
	t.Helper()
	lsn, err := w.AppendEntry(g, 1, i, data(g, i), wt)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func checkEntries(t *testing.T, r *replayed, g, from, to uint64) {
	t.Helper()
	es := r.ents[g]
	if uint64(len(es)) != to-from+1 {
		t.Fatalf("group %d: %d entries replayed, want %d..%d", g, len(es), from, to)
	}
	for k, e := range es {
		i := from + uint64(k)
		if e.Index != i || e.Term != 1 || !bytes.Equal(e.Data, data(g, i)) {
			t.Fatalf("group %d entry %d: got index %d term %d data %q", g, i, e.Index, e.Term, e.Data)
		}
	}
}

// Appends of many groups from many goroutines are all durable once reported and all
// replay, in order per group; the writer shares fsyncs among them.
func TestAppendReplayManyGroups(t *testing.T) {
	dir := t.TempDir()
	var smu sync.Mutex
	syncs, recs := 0, 0
	w, err := Open(dir, Options{SegmentBytes: 64 << 10, OnSync: func(_ time.Duration, n int) {
		smu.Lock()
		syncs++
		recs += n
		smu.Unlock()
	}}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	const groups, per = 16, 300
	var wg sync.WaitGroup
	for g := uint64(1); g <= groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wt := newWaiter()
			for i := uint64(1); i <= per; i++ {
				if err := wt.wait(mustAppend(t, w, g, i, wt)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	smu.Lock()
	if recs != groups*per || syncs >= recs {
		t.Errorf("%d records in %d fsync rounds: want %d records sharing rounds", recs, syncs, groups*per)
	}
	smu.Unlock()
	if w.Files() < 2 {
		t.Errorf("%d files: want rolls at 64 KiB", w.Files())
	}
	w2, r, err := open(t, dir, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	for g := uint64(1); g <= groups; g++ {
		checkEntries(t, r, g, 1, per)
	}
	if got := w2.LastLSN(); got != groups*per {
		t.Errorf("last lsn %d, want %d", got, groups*per)
	}
	// New appends continue the lsn sequence and replay after the old ones.
	wt := newWaiter()
	if err := wt.wait(mustAppend(t, w2, 1, per+1, wt)); err != nil {
		t.Fatal(err)
	}
	_ = w2.Close()
	w3, r, err := open(t, dir, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	checkEntries(t, r, 1, 1, per+1)
}

// lastFile returns the path of the newest WAL file holding a record.
func lastFile(t *testing.T, dir string) string {
	t.Helper()
	seqs, err := listFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(seqs) - 1; i >= 0; i-- {
		p := filepath.Join(dir, fileName(seqs[i]))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !allZero(b) {
			return p
		}
	}
	t.Fatal("no file with records")
	return ""
}

// recordEnd returns the byte position after the last record of the file at path.
func recordEnd(t *testing.T, path string) (last, end int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos := int64(0)
	for {
		h, ok := intact(b[pos:])
		if !ok {
			return last, pos
		}
		last = pos
		pos += recLen(h.n)
	}
}

// A torn last record (cut inside, or junk written after the last record) is cut at
// start; every earlier record replays and appends go on after it.
func TestTornTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tear func(t *testing.T, path string, last, end int64)
	}{
		{"cut inside the last record", func(t *testing.T, path string, last, end int64) {
			if err := os.Truncate(path, last+headerLen+3); err != nil {
				t.Fatal(err)
			}
		}},
		{"last record's payload damaged", func(t *testing.T, path string, last, end int64) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xff}, last+headerLen+1); err != nil {
				t.Fatal(err)
			}
		}},
		{"junk after the last record", func(t *testing.T, path string, last, end int64) {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 100), end); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _, err := open(t, dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			wt := newWaiter()
			for i := uint64(1); i <= 10; i++ {
				mustAppend(t, w, 7, i, wt)
			}
			if err := wt.wait(w.LastLSN()); err != nil {
				t.Fatal(err)
			}
			_ = w.Close()
			path := lastFile(t, dir)
			last, end := recordEnd(t, path)
			tc.tear(t, path, last, end)
			w, r, err := open(t, dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(9)
			if tc.name == "junk after the last record" {
				want = 10
			}
			checkEntries(t, r, 7, 1, want)
			wt = newWaiter()
			if err := wt.wait(mustAppend(t, w, 7, want+1, wt)); err != nil {
				t.Fatal(err)
			}
			_ = w.Close()
			w, r, err = open(t, dir, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			checkEntries(t, r, 7, 1, want+1)
		})
	}
}

// A damaged record that later records say was fsynced is damage to acknowledged
// data: Open refuses the WAL instead of cutting it.
func TestDamagedSyncedRecordRefused(t *testing.T) {
	dir := t.TempDir()
	w, _, err := open(t, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	wt := newWaiter()
	for i := uint64(1); i <= 5; i++ {
		if err := wt.wait(mustAppend(t, w, 3, i, wt)); err != nil { // one round each
			t.Fatal(err)
		}
	}
	_ = w.Close()
	path := lastFile(t, dir)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff}, headerLen+2); err != nil { // record 1's payload
		t.Fatal(err)
	}
	_ = f.Close()
	if _, _, err := open(t, dir, 1<<20); !errors.Is(err, ErrDataLoss) {
		t.Fatalf("open: %v, want ErrDataLoss", err)
	}
}

// A bad record in a file before the last one (fsynced whole) is ErrDataLoss.
func TestDamagedEarlierFileRefused(t *testing.T) {
	dir := t.TempDir()
	w, _, err := open(t, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	wt := newWaiter()
	if err := wt.wait(mustAppend(t, w, 3, 1, wt)); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	first := lastFile(t, dir)
	w, _, err = open(t, dir, 1<<20) // a new file for new records
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.wait(mustAppend(t, w, 3, 2, wt)); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if err := os.Truncate(first, headerLen+2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := open(t, dir, 1<<20); !errors.Is(err, ErrDataLoss) {
		t.Fatalf("open: %v, want ErrDataLoss", err)
	}
}

// Truncate removes the oldest files once every entry in them is at or below its
// group's floor, never a file with an entry above a floor; a dropped group holds
// nothing. Hard states survive the removal of the files they were written in.
func TestTruncateAndHardStateCarry(t *testing.T) {
	dir := t.TempDir()
	w, _, err := open(t, dir, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	wt := newWaiter()
	w.SetFloor(1, 0)
	w.SetFloor(2, 0)
	w.SetFloor(3, 0)
	hs := raftpb.HardState{Term: 4, Vote: 2, Commit: 1}
	if _, err := w.Append(3, []raftpb.Entry{{Term: 4, Index: 1, Data: data(3, 1)}}, &hs, wt); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 400; i++ {
		mustAppend(t, w, 1, i, wt)
		if err := wt.wait(mustAppend(t, w, 2, i, wt)); err != nil {
			t.Fatal(err)
		}
	}
	files := w.Files()
	if files < 4 {
		t.Fatalf("%d files, want several", files)
	}
	// Group 2's floor at 0 holds every file.
	w.SetFloor(1, 400)
	w.SetFloor(3, 1)
	if n, err := w.Truncate(); err != nil || n != 0 {
		t.Fatalf("truncate with group 2 at floor 0: removed %d (%v)", n, err)
	}
	w.SetFloor(2, 200)
	n, err := w.Truncate()
	if err != nil || n == 0 || n >= files-1 {
		t.Fatalf("truncate to group 2 at 200: removed %d of %d (%v)", n, files, err)
	}
	_ = w.Close()
	w, r, err := open(t, dir, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ents[2]; len(got) == 0 || got[0].Index > 201 || got[len(got)-1].Index != 400 {
		t.Fatalf("group 2 after truncation: %d entries from %v", len(got), got[0].Index)
	}
	if got := r.hs[3]; got != hs {
		t.Fatalf("hard state of group 3 after its file was removed: %+v, want %+v", got, hs)
	}
	// Dropping group 2 lets everything but the current file go.
	w.SetFloor(1, 400)
	w.SetFloor(3, 1)
	w.DropGroup(2)
	if _, err := w.Truncate(); err != nil {
		t.Fatal(err)
	}
	if w.Files() != 1 {
		t.Fatalf("%d files after dropping the last holder, want 1", w.Files())
	}
	_ = w.Close()
	w, r, err = open(t, dir, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := r.hs[3]; got != hs {
		t.Fatalf("hard state of group 3 after truncating everything: %+v, want %+v", got, hs)
	}
}

// After a failed write every waiter and every later append fails.
func TestAppendAfterCloseFails(t *testing.T) {
	w, _, err := open(t, t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	if _, err := w.AppendEntry(1, 1, 1, nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// AppendData's hand-made encoding is a raftpb.Entry.
func TestAppendDataIsAnEntry(t *testing.T) {
	dir := t.TempDir()
	w, _, err := open(t, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	wt := newWaiter()
	body := bytes.Repeat([]byte("x"), 300)
	if _, err := w.AppendData(9, 1<<40, 1<<20, []byte{7}, body, wt); err != nil {
		t.Fatal(err)
	}
	if err := wt.wait(w.LastLSN()); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	w, r, err := open(t, dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	es := r.ents[9]
	if len(es) != 1 || es[0].Term != 1<<40 || es[0].Index != 1<<20 || es[0].Type != raftpb.EntryNormal || !bytes.Equal(es[0].Data, append([]byte{7}, body...)) {
		t.Fatalf("replayed %+v", es)
	}
}

// A lazy hard state (AppendLazy) starts no write: it is written, and its waiter told,
// with the next round an Append starts, or at Flush; Close writes one still pending,
// and replay finds it.
func TestAppendLazy(t *testing.T) {
	dir := t.TempDir()
	w, _, err := open(t, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	durable := func(wt *waiter) uint64 {
		wt.mu.Lock()
		defer wt.mu.Unlock()
		return wt.durable
	}
	lazy := newWaiter()
	l1, err := w.AppendLazy(1, raftpb.HardState{Term: 2, Vote: 1, Commit: 5}, lazy)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if d := durable(lazy); d >= l1 {
		t.Fatalf("lazy hard state durable (%d) before any write", d)
	}
	other := newWaiter()
	l2 := mustAppend(t, w, 2, 1, other)
	if err := lazy.wait(l1); err != nil { // it rode with group 2's round
		t.Fatal(err)
	}
	if err := other.wait(l2); err != nil {
		t.Fatal(err)
	}
	l3, err := w.AppendLazy(1, raftpb.HardState{Term: 2, Vote: 1, Commit: 6}, lazy)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if d := durable(lazy); d >= l3 {
		t.Fatalf("second lazy hard state durable (%d) before any write", d)
	}
	w.Flush()
	if err := lazy.wait(l3); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendLazy(1, raftpb.HardState{Term: 2, Vote: 1, Commit: 7}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, r, err := open(t, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if hs := r.hs[1]; hs != (raftpb.HardState{Term: 2, Vote: 1, Commit: 7}) {
		t.Fatalf("replayed hard state %+v, want commit 7", hs)
	}
	checkEntries(t, r, 2, 1, 1)
}
