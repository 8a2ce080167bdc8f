package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, path string) (*Journal, [][]byte, int64) {
	t.Helper()
	j, recs, dropped, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return j, recs, dropped
}

func texts(recs [][]byte) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r)
	}
	return out
}

func TestAppendReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j, recs, _ := open(t, path)
	if len(recs) != 0 {
		t.Fatalf("new journal holds %q", texts(recs))
	}
	if err := j.Append([]byte("a"), []byte("")); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("bc")); err != nil {
		t.Fatal(err)
	}
	// Not synced, not closed: a process that dies now loses nothing it appended.
	j2, _, _, err := Open(path)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if j2 != nil {
		t.Fatal("second open returned a journal")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, recs, dropped := open(t, path)
	defer j.Close()
	if got := texts(recs); len(got) != 3 || got[0] != "a" || got[1] != "" || got[2] != "bc" || dropped != 0 {
		t.Fatalf("reopened: %q (dropped %d)", got, dropped)
	}
	if err := j.Append([]byte("d")); err != nil {
		t.Fatal(err)
	}
}

func TestTornAndCorruptTailDropped(t *testing.T) {
	for _, tc := range []struct {
		name string
		hurt func(b []byte) []byte
		keep int
	}{
		{"half a header", func(b []byte) []byte { return b[:len(b)-len("third")-5] }, 2},
		{"half a payload", func(b []byte) []byte { return b[:len(b)-2] }, 2},
		{"flipped payload byte", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }, 2},
		{"flipped byte in the middle", func(b []byte) []byte { b[len(magic)+frameHeader+7] ^= 1; return b }, 1},
		{"length beyond the file", func(b []byte) []byte { b[len(b)-len("third")-frameHeader] = 0x7f; return b }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j")
			j, _, _ := open(t, path)
			for _, r := range []string{"first", "second", "third"} {
				if err := j.Append([]byte(r)); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			size := len(b)
			if err := os.WriteFile(path, tc.hurt(b), 0o600); err != nil {
				t.Fatal(err)
			}
			j, recs, dropped := open(t, path)
			if len(recs) != tc.keep || dropped <= 0 {
				t.Fatalf("kept %q, dropped %d bytes; want %d records and a dropped tail", texts(recs), dropped, tc.keep)
			}
			// The tail is gone from the file: what is appended now is read back.
			if err := j.Append([]byte("after")); err != nil {
				t.Fatal(err)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j, recs, dropped = open(t, path)
			defer j.Close()
			if len(recs) != tc.keep+1 || string(recs[tc.keep]) != "after" || dropped != 0 {
				t.Fatalf("after the repair: %q, dropped %d", texts(recs), dropped)
			}
			if j.Size() >= int64(size)+int64(frameHeader+len("after")) {
				t.Errorf("size %d: the damaged tail was not cut", j.Size())
			}
		})
	}
}

func TestNotAJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	if err := os.WriteFile(path, []byte("hello, world"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := Open(path); err == nil {
		t.Fatal("opened a file that is not a journal")
	}
	if b, _ := os.ReadFile(path); string(b) != "hello, world" {
		t.Fatalf("the file was changed: %q", b)
	}
}

func TestRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j, _, _ := open(t, path)
	for i := 0; i < 100; i++ {
		if err := j.Append([]byte("old " + strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	before := j.Size()
	if err := j.Rewrite([][]byte{[]byte("x"), []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if j.Size() >= before {
		t.Errorf("size %d after rewrite, %d before", j.Size(), before)
	}
	if err := j.Append([]byte("z")); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	j, recs, _ := open(t, path)
	defer j.Close()
	if got := texts(recs); len(got) != 3 || got[0] != "x" || got[1] != "y" || got[2] != "z" {
		t.Fatalf("after rewrite: %q", got)
	}
}

func TestConcurrentAppendAndSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j")
	j, _, _ := open(t, path)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if err := j.Append([]byte(strconv.Itoa(w) + "-" + strconv.Itoa(i))); err != nil {
					t.Error(err)
					return
				}
				if err := j.Sync(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]byte("late")); !errors.Is(err, ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	j, recs, dropped := open(t, path)
	defer j.Close()
	if len(recs) != 400 || dropped != 0 {
		t.Fatalf("%d records, %d bytes dropped; want 400, 0", len(recs), dropped)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		seen[string(r)] = true
	}
	if len(seen) != 400 {
		t.Errorf("%d distinct records of 400", len(seen))
	}
}

// TestUnwrittenHeaderIsNew: a crash while a new journal's header is written can leave
// a part of it, or a file of zeros (its size on disk before its data). No record was
// ever appended to such a file, so it opens as a new journal instead of refusing.
func TestUnwrittenHeaderIsNew(t *testing.T) {
	for _, content := range [][]byte{[]byte(magic[:3]), make([]byte, len(magic)), make([]byte, 3)} {
		path := filepath.Join(t.TempDir(), "j")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		j, recs, _ := open(t, path)
		if len(recs) != 0 {
			t.Fatalf("%q: records %q", content, texts(recs))
		}
		if err := j.Append([]byte("a")); err != nil {
			t.Fatal(err)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		j, recs, _ = open(t, path)
		if got := texts(recs); len(got) != 1 || got[0] != "a" {
			t.Fatalf("%q: after reopening %q", content, got)
		}
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
