package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHashedDirNameNotAChannel: a long name's hashed directory name is not a valid
// channel name, and creating a channel whose directory holds another channel's
// meta.json (here: a directory of the older "~h~" scheme) is refused without touching it.
func TestHashedDirNameNotAChannel(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	long := strings.Repeat("v", 250)
	l := mustCreate(t, s, long, ChannelConfig{})
	mustAppend(t, l, kbatch(t, batchOpt{}, "victim"))
	victimDir := filepath.Base(l.dir)
	if _, _, err := s.Create(victimDir, ChannelConfig{}, false); err == nil {
		t.Fatalf("created a channel named after the hashed directory %q", victimDir)
	}
	if got := readAll(t, l, 0); len(got) != 1 || string(got[0].Value) != "victim" {
		t.Fatalf("victim data after create attempt: %+v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// A directory made by the older scheme (name[:100] + "~h~" + sha256) opens under the
	// name in its meta.json, and creating the channel named like that directory fails.
	oldDir := long[:100] + "~h~" + strings.Repeat("ab", 32)
	if err := os.Rename(filepath.Join(dir, "channels", victimDir), filepath.Join(dir, "channels", oldDir)); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, nil)
	defer s.Close()
	l, err := s.Get(long)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Create(oldDir, ChannelConfig{}, false)
	if !errors.Is(err, ErrInternal) {
		t.Fatalf("create over an old-scheme directory: %v, want ErrInternal", err)
	}
	if got := readAll(t, l, 0); len(got) != 1 || string(got[0].Value) != "victim" {
		t.Fatalf("victim data after create attempt: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "channels", oldDir, metaFile)); err != nil {
		t.Fatal(err)
	}
}
