package store

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// txnOp is one batch of the model log.
type txnOp struct {
	off, n int64
	pid    int64 // -1 plain
	kind   byte  // 'p' plain, 't' transactional, 'c' commit marker, 'a' abort marker
	seq    int32 // producer sequence of the first record (data batches)
}

// txnModel derives from the surviving batches what the log must report.
type txnModel struct {
	ops   []txnOp
	start int64
}

func (m *txnModel) next() int64 {
	if len(m.ops) == 0 {
		return 0
	}
	o := m.ops[len(m.ops)-1]
	return o.off + o.n
}

func (m *txnModel) derive() (open map[int64]int64, aborted []abortedTxn) {
	open = map[int64]int64{}
	for _, o := range m.ops {
		switch o.kind {
		case 't':
			if _, ok := open[o.pid]; !ok {
				open[o.pid] = o.off
			}
		case 'c', 'a':
			first := open[o.pid]
			delete(open, o.pid)
			if o.kind == 'a' && o.off >= m.start {
				aborted = append(aborted, abortedTxn{pid: o.pid, first: first, last: o.off})
			}
		}
	}
	return open, aborted
}

func (m *txnModel) lso() int64 {
	open, _ := m.derive()
	lso := m.next()
	for _, f := range open {
		lso = min(lso, f)
	}
	return max(lso, min(m.start, m.next()))
}

// committed lists the offsets a read_committed reader gets from the log start.
func (m *txnModel) committed() []int64 {
	_, aborted := m.derive()
	lso := m.lso()
	var out []int64
	for _, o := range m.ops {
		if o.kind == 'c' || o.kind == 'a' || o.off >= lso {
			continue
		}
		skip := false
		for _, a := range aborted {
			if o.kind == 't' && a.pid == o.pid && o.off >= a.first && o.off < a.last {
				skip = true
			}
		}
		for i := int64(0); i < o.n && !skip; i++ {
			if o.off+i >= m.start && o.off+i < lso {
				out = append(out, o.off+i)
			}
		}
	}
	return out
}

// nextSeq is the producer sequence pid's next data batch takes.
func (m *txnModel) nextSeq(pid int64) int32 {
	for i := len(m.ops) - 1; i >= 0; i-- {
		if o := m.ops[i]; o.pid == pid && (o.kind == 'p' || o.kind == 't') {
			return o.seq + int32(o.n)
		}
	}
	return 0
}

func (m *txnModel) check(t *testing.T, l *Log, step int) {
	t.Helper()
	if hw := l.HighWatermark(); hw != m.next() {
		t.Fatalf("step %d: hw %d, model %d", step, hw, m.next())
	}
	if got, want := l.LastStable(), m.lso(); got != want {
		t.Fatalf("step %d: LSO %d, model %d; start %d ops %+v", step, got, want, m.start, m.ops)
	}
	_, aborted := m.derive()
	var want []AbortedTxn
	for _, a := range aborted {
		want = append(want, AbortedTxn{ProducerID: a.pid, FirstOffset: a.first})
	}
	if got := l.AbortedTxns(m.start, m.next()); !reflect.DeepEqual(got, want) {
		t.Fatalf("step %d: aborted %v, model %v", step, got, want)
	}
	recs, _, err := l.ReadCommitted(l.LogStart(), 1<<20, 1<<30)
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	got := make([]int64, 0, len(recs))
	for _, r := range recs {
		got = append(got, r.Offset)
	}
	if w := m.committed(); !reflect.DeepEqual(got, w) && (len(got) > 0 || len(w) > 0) {
		t.Fatalf("step %d: committed offsets %v, model %v; lso %d start %d ops %+v", step, got, w, l.LastStable(), l.LogStart(), m.ops[max(0, len(m.ops)-8):])
	}
	open, _ := m.derive()
	for _, p := range l.Producers() {
		f, ok := open[p.ID]
		if !ok {
			f = -1
		}
		if p.TxnFirstOffset != f {
			t.Fatalf("step %d: producer %d open txn at %d, model %d", step, p.ID, p.TxnFirstOffset, f)
		}
	}
}

// crashCopy copies the store's data directory as a kill -9 would leave it (every
// write is in the files; nothing was closed), optionally cutting the last tear bytes
// off the channel's last segment. The copy holds s's checkpoint lock, so that in WAL
// mode no checkpoint removes WAL files or moves the checkpoint under the walk (a kill -9
// leaves all files as of one moment). In WAL mode a crash can tear only what the last
// checkpoint does not cover (the segment is fsynced before it), and the WAL holds it:
// a tear of a checkpointed batch is left out.
func crashCopy(t *testing.T, s *Store, src string, tear int64, l *Log) string {
	t.Helper()
	chanDir := l.dir
	s.ckptMu.Lock()
	defer s.ckptMu.Unlock()
	if s.opts.WAL {
		l.mu.Lock()
		if l.wal.ckptIndex >= l.wal.index {
			tear = 0
		}
		l.mu.Unlock()
	}
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if tear > 0 {
		rel, _ := filepath.Rel(src, chanDir)
		segs, _ := filepath.Glob(filepath.Join(dst, rel, "*.log"))
		sort.Strings(segs)
		last := segs[len(segs)-1]
		fi, err := os.Stat(last)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(last, fi.Size()-tear); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestTxnModel drives a channel with random plain and transactional batches of four
// producers, commit and abort markers (also for producers without an open
// transaction), segment rolls, DeleteRecords, clean reopens and kill -9 copies with
// torn last batches (a half-written marker or data batch), removing the producer
// snapshot now and then (while no segment was deleted), and checks the LSO, the aborted index, the producers' open
// transactions and every read_committed record against a model derived from the
// batches that survive.
func TestTxnModel(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 8
	}
	for seed := 0; seed < seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		dir := t.TempDir()
		s := openStore(t, dir, nil)
		l := mustCreate(t, s, "model", ChannelConfig{SegmentBytes: 700})
		m := &txnModel{}
		snapMissing, missingBase := false, int64(0)
		for step := 0; step < 150; step++ {
			pid := int64(rng.IntN(4))
			r := rng.IntN(100)
			if snapMissing && l.activeBase() != missingBase {
				snapMissing = false // rolled: a new snapshot was written
			}
			switch {
			case r < 20:
				mustAppend(t, l, kbatch(t, batchOpt{}, "p"))
				m.ops = append(m.ops, txnOp{off: m.next(), n: 1, pid: -1, kind: 'p'})
			case r < 55:
				n := 1 + rng.IntN(3)
				vals := strings.Split(strings.Repeat("v,", n), ",")[:n]
				seq := m.nextSeq(pid)
				res := mustAppend(t, l, kbatch(t, batchOpt{pid: pid, epoch: 1, seq: seq, txn: true}, vals...))
				if res.BaseOffset != m.next() {
					t.Fatalf("seed %d step %d: appended at %d, model %d", seed, step, res.BaseOffset, m.next())
				}
				m.ops = append(m.ops, txnOp{off: m.next(), n: int64(n), pid: pid, kind: 't', seq: seq})
			case r < 80:
				commit := rng.IntN(2) == 0
				res := mustMarker(t, l, TxnMarker{ProducerID: pid, ProducerEpoch: 1, Commit: commit})
				open, _ := m.derive()
				if _, ok := open[pid]; ok == res.Duplicate {
					t.Fatalf("seed %d step %d: marker for pid %d written=%v, open=%v", seed, step, pid, !res.Duplicate, ok)
				}
				if !res.Duplicate {
					k := byte('a')
					if commit {
						k = 'c'
					}
					m.ops = append(m.ops, txnOp{off: m.next(), n: 1, pid: pid, kind: k})
				}
			case r < 84 && !snapMissing:
				before := m.start + rng.Int64N(m.next()-m.start+1)
				if _, err := l.DeleteRecords(before); err != nil {
					t.Fatal(err)
				}
				// Time retention may delete more (the batches' timestamps are old).
				m.start = max(m.start, before, l.LogStart())
			case r < 90:
				ldir := l.dir
				_ = s.Close()
				// Without a snapshot the state is rebuilt from the retained segments,
				// exact only while no segment is deleted until the next roll writes
				// one (an open transaction whose first batch was deleted restarts at
				// its first retained one).
				if rng.IntN(3) == 0 && l.segs[0].base == 0 {
					snaps, _ := filepath.Glob(filepath.Join(ldir, "*.snapshot"))
					for _, p := range snaps {
						_ = os.Remove(p)
					}
					snapMissing, missingBase = true, l.activeBase()
				}
				s = openStore(t, dir, nil)
				l, _ = s.Get("model")
			default:
				// kill -9, maybe with the last batch half written.
				var tear int64
				if n := len(m.ops); n > 0 && rng.IntN(2) == 0 && l.active.size.Load() > 0 && m.ops[n-1].off >= max(l.active.base, m.start) {
					last := m.ops[n-1]
					raw, err := l.ReadRaw(last.off, 1)
					if err != nil {
						t.Fatal(err)
					}
					tear = 1 + rng.Int64N(int64(len(raw)))
					if !s.opts.WAL {
						m.ops = m.ops[:n-1] // in WAL mode the WAL holds it: replayed at open
					}
				}
				ndir := crashCopy(t, s, dir, tear, l)
				_ = s.Close()
				dir = ndir
				s = openStore(t, dir, nil)
				l, _ = s.Get("model")
			}
			m.check(t, l, step)
		}
		_ = s.Close()
	}
}
