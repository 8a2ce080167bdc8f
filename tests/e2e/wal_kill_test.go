package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// WAL mode (storage-core --wal, issue 16 step 1) under kill -9.

// TestWALKillStorageDuringProduce: TestKillStorageDuringProduce on 12 partitions with
// storage-core in WAL mode: every record acknowledged before the SIGKILL is there once,
// at its acknowledged offset, and the producer finishes after the restart.
func TestWALKillStorageDuringProduce(t *testing.T) {
	killDuringProduceWith(t, stack.StorageCore, killPlan{
		opts:       stack.Options{StorageFlags: []string{"--wal"}},
		partitions: 12,
	})
}

// TestWALKillTruncatedAndTorn: WAL mode with 1 MiB WAL files and 1 KiB records
// (uncompressed) on 8 partitions. storage-core is killed with SIGKILL once checkpoints have removed WAL
// files (the oldest file left is not the first), then, while it is down, the WAL gets
// a torn last record (a record header followed by junk where the next record would
// start) and one partition's active segment loses its tail past its checkpointed
// offset (as a crash loses segment pages that were never fsynced). After the restart
// the torn WAL record is cut (logged), the segment tail is written again from the WAL,
// and every acknowledged record is there once at its acknowledged offset.
func TestWALKillTruncatedAndTorn(t *testing.T) {
	var cut string
	killDuringProduceWith(t, stack.StorageCore, killPlan{
		opts:       stack.Options{StorageFlags: []string{"--wal", "--wal-file-bytes", strconv.Itoa(1 << 20)}},
		partitions: 8,
		n:          40_000,
		pad:        1000,
		pace:       10 * time.Millisecond, // about 10 MB/s: a run of about 4 s
		clientOpts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())},
		readyWhat:  "checkpoints to remove the first WAL files",
		ready: func(s *stack.Stack) bool {
			seqs := walFiles(t, s)
			return len(seqs) > 0 && seqs[0] > 2
		},
		whileDown: func(t *testing.T, s *stack.Stack) {
			seqs := walFiles(t, s)
			t.Logf("WAL files at the kill: %v", seqs)
			tearWAL(t, s, seqs)
			cut = cutSegmentPastCheckpoint(t, s)
		},
		after: func(t *testing.T, s *stack.Stack) {
			logb, err := os.ReadFile(s.Storage.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(logb, []byte("truncated torn tail of the write-ahead log")) {
				t.Errorf("storage-core did not log the torn WAL tail it cut")
			}
			t.Logf("segment cut while down: %s", cut)
		},
	})
}

// walFiles lists the sequence numbers of the WAL files of s's storage-core.
func walFiles(t *testing.T, s *stack.Stack) []uint64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(s.DataDir, "wal", "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, n := range names {
		v, err := strconv.ParseUint(strings.TrimSuffix(filepath.Base(n), ".wal"), 10, 64)
		if err == nil {
			seqs = append(seqs, v)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}

// WAL record layout (services/storage-core/internal/wal): a 40-byte header whose
// bytes 4..8 are the payload length (little endian), the payload, zero padding to 8;
// a zero header ends the file.
const walHeaderLen = 40

// tearWAL writes, after the last record of the newest WAL file holding one, a copy of
// that record's header followed by junk: a record torn in the middle of its write.
func tearWAL(t *testing.T, s *stack.Stack, seqs []uint64) {
	t.Helper()
	for i := len(seqs) - 1; i >= 0; i-- {
		path := filepath.Join(s.DataDir, "wal", leftPad20(seqs[i])+".wal")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pos, last := 0, -1
		for pos+walHeaderLen <= len(b) && !allZeroBytes(b[pos:pos+walHeaderLen]) {
			last = pos
			n := int(binary.LittleEndian.Uint32(b[pos+4:]))
			pos += (walHeaderLen + n + 7) &^ 7
		}
		if last < 0 {
			continue
		}
		torn := append(append([]byte(nil), b[last:last+walHeaderLen]...), bytes.Repeat([]byte{0xab}, 24)...)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(torn, int64(pos)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("tore the WAL: %d bytes at byte %d of %s", len(torn), pos, filepath.Base(path))
		return
	}
	t.Fatal("no WAL file holds a record")
}

func leftPad20(v uint64) string {
	s := strconv.FormatUint(v, 10)
	return strings.Repeat("0", 20-len(s)) + s
}

func allZeroBytes(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// cutSegmentPastCheckpoint cuts, in the first partition whose active segment holds
// batches past its checkpointed offset (<data>/wal/checkpoint: "TWC1", count, then
// (group, index, next offset) big endian; the group is in the channel's meta.json),
// the segment at the first such batch plus 7 bytes. It returns what it cut.
func cutSegmentPastCheckpoint(t *testing.T, s *stack.Stack) string {
	t.Helper()
	ck, err := os.ReadFile(filepath.Join(s.DataDir, "wal", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	next := map[uint64]int64{}
	for i := 0; 8+24*i+24 <= len(ck)-4; i++ {
		p := ck[8+24*i:]
		next[binary.BigEndian.Uint64(p)] = int64(binary.BigEndian.Uint64(p[16:]))
	}
	dirs, _ := filepath.Glob(filepath.Join(s.DataDir, "channels", "kafka.kill-*"))
	sort.Strings(dirs)
	for _, d := range dirs {
		mb, err := os.ReadFile(filepath.Join(d, "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Group uint64 `json:"group"`
		}
		if err := json.Unmarshal(mb, &m); err != nil || m.Group == 0 {
			t.Fatalf("meta.json of %s: group %d (%v)", d, m.Group, err)
		}
		segs, _ := filepath.Glob(filepath.Join(d, "*.log"))
		sort.Strings(segs)
		seg := segs[len(segs)-1]
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for pos := 0; pos+61 <= len(b); {
			base := int64(binary.BigEndian.Uint64(b[pos:]))
			length := int(binary.BigEndian.Uint32(b[pos+8:])) + 12
			if length < 61 || pos+length > len(b) {
				break
			}
			if base >= next[m.Group] {
				if err := os.Truncate(seg, int64(pos+7)); err != nil {
					t.Fatal(err)
				}
				return filepath.Base(d) + "/" + filepath.Base(seg) + " at offset " + strconv.FormatInt(base, 10) +
					" (checkpoint " + strconv.FormatInt(next[m.Group], 10) + "), " + strconv.Itoa(len(b)-pos-7) + " bytes"
			}
			pos += length
		}
	}
	return "nothing: every segment was checkpointed whole"
}
