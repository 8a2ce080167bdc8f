package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
)

func openWALStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{WAL: true, RetentionInterval: -1, CheckpointInterval: -1, WALFileBytes: 64 << 10, minSegmentBytes: 14}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func values(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func walFileCount(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// TestWALModeKillReplay: in WAL mode, appends to many channels from many goroutines
// are acknowledged; a kill -9 copy of the data directory whose active segments lost
// everything past their checkpoint (pages never fsynced) opens with every acknowledged
// record, at its offset, once: the WAL above each checkpoint is written again. Reopening
// once more replays nothing twice.
func TestWALModeKillReplay(t *testing.T) {
	dir := t.TempDir()
	s := openWALStore(t, dir)
	const channels, per = 8, 60
	logs := make([]*Log, channels)
	for i := range logs {
		logs[i] = mustCreate(t, s, fmt.Sprintf("ch-%d", i), ChannelConfig{SegmentBytes: 4 << 10})
	}
	var wg sync.WaitGroup
	for i, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				if k == per/2 && i == 0 {
					if err := s.RunCheckpoint(); err != nil { // a checkpoint in the middle
						t.Error(err)
					}
				}
				res, err := l.AppendBatches(kbatch(t, batchOpt{}, fmt.Sprintf("%d-%d", i, k)))
				if err != nil || res.BaseOffset != int64(k) {
					t.Errorf("channel %d append %d: %+v %v", i, k, res, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// kill -9: the files as they are, then every active segment loses its part past
	// the checkpoint (a crash before the background fsync).
	crashed := crashCopy(t, s, dir, 0, logs[0])
	_ = s.Close()
	ck, err := readCheckpoint(filepath.Join(crashed, walDirName))
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, l := range logs {
		segs, _ := filepath.Glob(filepath.Join(crashed, "channels", filepath.Base(l.dir), "*.log"))
		sort.Strings(segs)
		last := segs[len(segs)-1]
		base := parseBase(t, last)
		if c := ck[l.wal.group]; c.next <= base {
			fi, _ := os.Stat(last)
			lost += int(fi.Size())
			if err := os.Truncate(last, fi.Size()/2); err != nil { // torn in the middle of a batch
				t.Fatal(err)
			}
		}
	}
	if lost == 0 {
		t.Fatal("no active segment held data past its checkpoint: the test cuts nothing")
	}
	for round := 0; round < 2; round++ {
		s = openWALStore(t, crashed)
		for i := range logs {
			l, err := s.Get(fmt.Sprintf("ch-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			got := values(readAll(t, l, 0))
			if len(got) != per || l.HighWatermark() != per {
				t.Fatalf("round %d channel %d: %d records, high watermark %d, want %d", round, i, len(got), l.HighWatermark(), per)
			}
			for k, v := range got {
				if v != fmt.Sprintf("%d-%d", i, k) {
					t.Fatalf("round %d channel %d offset %d: %q", round, i, k, v)
				}
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func parseBase(t *testing.T, path string) int64 {
	t.Helper()
	var b int64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d.log", &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWALModeTruncation: checkpoints remove the WAL files every channel's checkpoint
// has passed, while a channel written only before the checkpoint does not hold them;
// a deleted channel holds nothing, and its entries never reach a channel created again
// under its name.
func TestWALModeTruncation(t *testing.T) {
	dir := t.TempDir()
	s := openWALStore(t, dir)
	idle := mustCreate(t, s, "idle", ChannelConfig{})
	mustAppend(t, idle, kbatch(t, batchOpt{}, "once"))
	gone := mustCreate(t, s, "gone", ChannelConfig{})
	busy := mustCreate(t, s, "busy", ChannelConfig{})
	val := strings.Repeat("x", 1000)
	for k := 0; k < 300; k++ {
		mustAppend(t, busy, kbatch(t, batchOpt{}, val))
		mustAppend(t, gone, kbatch(t, batchOpt{}, "old-"+fmt.Sprint(k)))
	}
	before := walFileCount(t, dir)
	if len(before) < 4 {
		t.Fatalf("%d WAL files of 64 KiB after ~300 KiB: want several", len(before))
	}
	if err := s.RunCheckpoint(); err != nil {
		t.Fatal(err)
	}
	after := walFileCount(t, dir)
	if len(after) != 1 || after[0] != before[len(before)-1] {
		t.Fatalf("WAL files after the checkpoint %v, want only the last of %v", after, before)
	}
	if err := s.Delete("gone", false); err != nil {
		t.Fatal(err)
	}
	again := mustCreate(t, s, "gone", ChannelConfig{})
	mustAppend(t, again, kbatch(t, batchOpt{}, "new"))
	// kill -9 copy: the old "gone" entries still in the WAL must not replay into the
	// new channel of that name.
	crashed := crashCopy(t, s, dir, 0, again)
	_ = s.Close()
	s = openWALStore(t, crashed)
	defer s.Close()
	l, err := s.Get("gone")
	if err != nil {
		t.Fatal(err)
	}
	if got := values(readAll(t, l, 0)); len(got) != 1 || got[0] != "new" {
		t.Fatalf("channel created again after a delete holds %v, want [new]", got)
	}
	l, _ = s.Get("idle")
	if got := values(readAll(t, l, 0)); len(got) != 1 || got[0] != "once" {
		t.Fatalf("idle channel holds %v", got)
	}
}

// TestWALModeRefusedWithoutFlag: a data directory holding a WAL does not open without
// WAL mode (its acknowledged appends may be in no fsynced segment), and WAL mode does
// not take an fsync interval.
func TestWALModeRefusedWithoutFlag(t *testing.T) {
	if forceWAL {
		t.Skip("built with -tags walmode: every store opens in WAL mode")
	}
	dir := t.TempDir()
	s := openWALStore(t, dir)
	mustAppend(t, mustCreate(t, s, "c", ChannelConfig{}), kbatch(t, batchOpt{}, "a"))
	_ = s.Close()
	if _, err := Open(dir, Options{RetentionInterval: -1}, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "--wal") {
		t.Fatalf("open without WAL mode: %v, want a refusal naming --wal", err)
	}
	if _, err := Open(t.TempDir(), Options{WAL: true, FsyncInterval: 10}, zaptest.NewLogger(t)); err == nil {
		t.Fatal("WAL mode with an fsync interval opened")
	}
}
