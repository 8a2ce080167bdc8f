package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckReplicas: three raft replicas of a channel of many small segments agree
// over the prefix all hold (a follower stopped after 20 of 30 appends bounds it at
// offset 20); then a byte changed in one replica's batch at offset 5, another's
// sealed .index file and its leader-epoch file are each reported, at their offsets,
// against the right replica, and nothing else is.
func TestCheckReplicas(t *testing.T) {
	c := newRaftCluster(t)
	const name = "check.log"
	group := c.createWith(name, ChannelConfig{SegmentBytes: 400})
	prod := &Producer{ID: 7}
	appendN := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			prod.BaseSequence = int32(i)
			if res, err := c.appendOn(c.leader(group), name, fmt.Sprintf("value-%02d", i), prod); err != nil || res.BaseOffset != int64(i) {
				t.Fatalf("append %d: %+v %v", i, res, err)
			}
		}
	}
	appendN(0, 20)
	c.sameBytes(name, 20)
	lead := c.leader(group)
	follower := uint64(1)
	for follower == lead {
		follower++
	}
	c.stop(follower)
	appendN(20, 30)
	r := c.checkReplicas()[name]
	if r.From != 0 || r.To != 20 || r.Batches != 20 {
		t.Fatalf("compared %+v, want offsets [0, 20) in 20 batches (the stopped follower's log)", r)
	}
	dirs := []string{c.dirs[1], c.dirs[2], c.dirs[3]}
	chDir := func(i int) string { return filepath.Join(dirs[i], "channels", dirName(name)) }

	// Replica 1: the last byte of the batch at offset 5 (a record value byte).
	rc := &replicaChannel{replica: 1, dir: chDir(1)}
	if err := rc.load(); err != nil {
		t.Fatal(err)
	}
	changed := false
	for _, b := range rc.bases {
		p := filepath.Join(rc.dir, segmentName(b, ".log"))
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for pos := 0; pos+batchHeaderLen <= len(data); {
			n, err := frameLen(data[pos:])
			if err != nil {
				break
			}
			if parseHeader(data[pos:]).BaseOffset == 5 {
				data[pos+n-1] ^= 0xff
				if err := os.WriteFile(p, data, 0o644); err != nil {
					t.Fatal(err)
				}
				changed = true
			}
			pos += n
		}
	}
	// Replica 2: its first sealed segment's offset index and its epoch file.
	idx := filepath.Join(chDir(2), segmentName(0, ".index"))
	if _, err := os.Stat(idx); !changed || err != nil {
		t.Fatalf("no batch at offset 5 (%v) or no index of segment 0 (%v) to change", changed, err)
	}
	if err := os.WriteFile(idx, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 99}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chDir(2), epochFile), []byte("0\n1\n99 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckReplicas(dirs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Diffs {
		got = append(got, fmt.Sprintf("%s replica %d ref %d offset %d %s", d.Channel, d.Replica, d.Ref, d.Offset, strings.Fields(d.What)[0]))
	}
	slices.Sort(got)
	want := []string{
		name + " replica 1 ref 0 offset 5 batch",
		name + " replica 2 ref 0 offset 0 .index",
		name + " replica 2 ref 0 offset 0 leader",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("differences %q, want %q (%+v)", got, want, rep.Diffs)
	}
}

// TestProducerStateTextCleaned: the producer state a replica check compares leaves
// out aborted transactions whose marker is below the compared range (each replica's
// cleaner drops them on its own), and state left with no transaction equals none.
func TestProducerStateTextCleaned(t *testing.T) {
	ps := producers{1: {epoch: 2, coordEpoch: -1, lastMs: 5}}
	kept := newTxnState()
	kept.aborted = []abortedTxn{{pid: 1, first: 3, last: 9, lso: 10}, {pid: 1, first: 20, last: 30, lso: 31}}
	cleaned := newTxnState()
	cleaned.aborted = []abortedTxn{{pid: 1, first: 20, last: 30, lso: 31}}
	if a, b := producerStateText(ps, kept, 15), producerStateText(ps, cleaned, 15); a != b {
		t.Fatalf("aborted entry below the range compared: %q vs %q", a, b)
	}
	if a, b := producerStateText(ps, kept, 31), producerStateText(ps, nil, 31); a != b {
		t.Fatalf("only aborted entries below the range differ from no transaction state: %q vs %q", a, b)
	}
	other := producers{1: {epoch: 2, coordEpoch: -1, lastMs: 6}}
	if a, b := producerStateText(ps, nil, 0), producerStateText(other, nil, 0); a != b {
		t.Fatalf("last-append time compared: %q vs %q", a, b)
	}
	if a, b := producerStateText(ps, kept, 0), producerStateText(ps, cleaned, 0); a == b {
		t.Fatalf("aborted entry in the range not compared: %q", a)
	}
}
