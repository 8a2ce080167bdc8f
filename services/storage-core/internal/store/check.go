package store

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The replica check (issue 16: "replicas are byte-identical over the committed
// prefix"). It reads the data directories of a channel's replicas, never writing, and
// compares each channel over the offsets every replica holds: a replica's segments
// hold only applied entries, which raft applies only once committed, so the common
// prefix of the segments is committed on all of them. Offsets, epochs and timestamps
// are stamped at apply, so the batch bytes there must be equal byte for byte. Compared
// per channel, each replica against the first that holds it:
//   - meta.json: name, kind, config, creation time, group id, log start;
//   - the batches from the largest log start (and, on compacted channels, the first
//     segment every replica's cleaner has left as written: each replica cleans its own
//     segments, see raft mode's compaction) to the smallest log end, frame by frame
//     (segment files may be cut at other offsets: segment_ms rolls by each node's
//     clock);
//   - the leader-epoch index over that range;
//   - the .index and .timeindex files of a sealed segment both replicas hold at the
//     same base with the same bytes (a missing file is rebuilt at start: not a
//     difference);
//   - the producer snapshot both hold at the same base: producers, epochs, coordinator
//     epochs and last batches, open transactions and the aborted ones whose marker is
//     in the range (not the last-append time, which a replica resets to its own clock
//     when it opens a channel, nor aborted ones below the range, which a replica's
//     cleaner drops once it removed their batches).
//
// The directories should be of stopped nodes (or copies): a running node's active
// segment, cleaner swaps and snapshot files change while they are read.

// ReplicaDiff is one difference CheckReplicas found in a channel.
type ReplicaDiff struct {
	Channel string
	// Replica is the index (in the dirs given) of the replica that differs from the
	// channel's reference replica Ref.
	Replica, Ref int
	// Offset is the first offset that differs (the base offset of the first batch
	// that is not equal); -1 when the difference is not at an offset.
	Offset int64
	What   string
}

// ChannelRange is the offset range [From, To) CheckReplicas compared for a channel
// on every replica holding it, and the batches and bytes in it (the reference's).
type ChannelRange struct {
	Channel  string
	From, To int64
	Batches  int
	Bytes    int64
}

// ReplicaReport is what CheckReplicas found: the compared range of every channel
// (sorted by name) and the differences (none when the replicas agree).
type ReplicaReport struct {
	Channels []ChannelRange
	Diffs    []ReplicaDiff
}

// CheckReplicas compares the channels of the data directories dirs (two or more,
// each a storage-core --data-dir of one replica) as described above. It returns an
// error only when a directory cannot be read at all; what differs, or a channel whose
// files cannot be read on a replica, is a ReplicaDiff.
func CheckReplicas(dirs []string) (*ReplicaReport, error) {
	if len(dirs) < 2 {
		return nil, fmt.Errorf("%w: check replicas: %d data directories, want at least 2", ErrInvalidArgument, len(dirs))
	}
	chans := make([]map[string]string, len(dirs)) // per replica: channel name -> its directory
	names := map[string]bool{}
	for i, d := range dirs {
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("check replicas: %w", err)
		}
		m, err := listChannelDirs(filepath.Join(d, "channels"))
		if err != nil {
			return nil, fmt.Errorf("check replicas: %s: %w", d, err)
		}
		chans[i] = m
		for n := range m {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	rep := &ReplicaReport{}
	for _, name := range sorted {
		var reps []replicaChannel
		for i := range dirs {
			if d, ok := chans[i][name]; ok {
				reps = append(reps, replicaChannel{replica: i, dir: d})
			}
		}
		for i := range dirs {
			if _, ok := chans[i][name]; !ok {
				rep.Diffs = append(rep.Diffs, ReplicaDiff{Channel: name, Replica: i, Ref: reps[0].replica, Offset: -1, What: "channel missing"})
			}
		}
		if len(reps) > 1 {
			checkChannel(rep, name, reps)
		}
	}
	return rep, nil
}

// listChannelDirs maps each channel name (from meta.json) under dir to its directory.
func listChannelDirs(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		m, err := readMeta(p)
		if err != nil {
			continue // not a channel (a create that did not finish)
		}
		out[m.Name] = p
	}
	return out, nil
}

// replicaChannel is one replica's copy of a channel being checked.
type replicaChannel struct {
	replica int
	dir     string
	meta    *meta
	bases   []int64 // segment base offsets, ascending
	from    int64   // first offset left as written by this replica's cleaner
}

// load reads r's meta.json and segment list.
func (r *replicaChannel) load() error {
	m, err := readMeta(r.dir)
	if err != nil {
		return err
	}
	r.meta = m
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		n := e.Name()
		if _, _, ok := parseSwapName(n); ok {
			return fmt.Errorf("unfinished cleaner swap %s (open the node once to finish it)", n)
		}
		if b, ok := strings.CutSuffix(n, ".log"); ok && len(b) == 20 {
			if v, err := strconv.ParseInt(b, 10, 64); err == nil {
				r.bases = append(r.bases, v)
			}
		}
	}
	slices.Sort(r.bases)
	r.from = max(m.LogStartOffset, 0)
	if b, err := os.ReadFile(filepath.Join(r.dir, cleanerCheckpointFile)); err == nil {
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// The cleaner rewrites only segments whose base is below its checkpoint.
		i, _ := slices.BinarySearch(r.bases, v)
		if i < len(r.bases) {
			r.from = max(r.from, r.bases[i])
		} else {
			r.from = max(r.from, v)
		}
	}
	return nil
}

func checkChannel(rep *ReplicaReport, name string, reps []replicaChannel) {
	diff := func(r, ref *replicaChannel, off int64, format string, args ...any) {
		rep.Diffs = append(rep.Diffs, ReplicaDiff{Channel: name, Replica: r.replica, Ref: ref.replica, Offset: off, What: fmt.Sprintf(format, args...)})
	}
	ok := reps[:0:0]
	for i := range reps {
		if err := reps[i].load(); err != nil {
			rep.Diffs = append(rep.Diffs, ReplicaDiff{Channel: name, Replica: reps[i].replica, Ref: reps[0].replica, Offset: -1, What: err.Error()})
			continue
		}
		ok = append(ok, reps[i])
	}
	if len(ok) < 2 {
		return
	}
	ref := &ok[0]
	from := int64(0)
	for i := range ok {
		r := &ok[i]
		from = max(from, r.from)
		if i == 0 {
			continue
		}
		a, b := *ref.meta, *r.meta
		if a.LogStartOffset != b.LogStartOffset {
			diff(r, ref, min(a.LogStartOffset, b.LogStartOffset), "log start %d, reference %d", b.LogStartOffset, a.LogStartOffset)
		}
		a.LogStartOffset, b.LogStartOffset = 0, 0
		if !reflect.DeepEqual(a, b) {
			diff(r, ref, -1, "meta.json %+v, reference %+v", b, a)
		}
	}
	rng := ChannelRange{Channel: name, From: from, To: from}
	cmp := compareBatches(ok, from, &rng, diff)
	rep.Channels = append(rep.Channels, rng)
	compareEpochs(ok, from, rng.To, diff)
	for i := 1; i < len(ok); i++ {
		if cmp[i] {
			compareIndexes(ref, &ok[i], from, rng.To, diff)
		}
	}
	compareSnapshots(ok, from, rng.To, diff)
}

// frameStream reads a replica's batches in offset order across its segments.
type frameStream struct {
	r     *replicaChannel
	seg   int
	f     *os.File
	br    *bufio.Reader
	frame []byte
	err   error
}

// next returns the next whole batch frame, or nil at the end of the log (the end of
// the last segment, or a torn or preallocated tail there) or on an error (s.err).
func (s *frameStream) next() []byte {
	for {
		if s.br == nil {
			if s.seg >= len(s.r.bases) {
				return nil
			}
			f, err := os.Open(filepath.Join(s.r.dir, segmentName(s.r.bases[s.seg], ".log")))
			if err != nil {
				s.err = err
				return nil
			}
			s.f, s.br = f, bufio.NewReaderSize(f, 1<<20)
		}
		var hdr [batchLengthField]byte
		_, err := io.ReadFull(s.br, hdr[:])
		if err == nil {
			n := int(int32(binary.BigEndian.Uint32(hdr[offBatchLength:]))) + batchLengthField
			if n >= batchHeaderLen {
				s.frame = append(append(s.frame[:0], hdr[:]...), make([]byte, n-batchLengthField)...)
				if _, err = io.ReadFull(s.br, s.frame[batchLengthField:]); err == nil {
					return s.frame
				}
			}
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			s.err = err
			return nil
		}
		last := s.seg == len(s.r.bases)-1
		s.close()
		s.seg++
		if last {
			return nil
		}
		// A sealed segment ends where its bytes end; a bad frame inside one is left
		// to the frame comparison (the next segment's first batch follows).
	}
}

func (s *frameStream) close() {
	if s.f != nil {
		_ = s.f.Close()
		s.f, s.br = nil, nil
	}
}

// compareBatches walks every replica's batches from offset from in lockstep, each
// against the reference's, until one replica's log ends. It fills rng and returns, per
// replica, whether all its batches in the range were equal to the reference's.
func compareBatches(reps []replicaChannel, from int64, rng *ChannelRange, diff func(r, ref *replicaChannel, off int64, format string, args ...any)) []bool {
	streams := make([]*frameStream, len(reps))
	same := make([]bool, len(reps))
	for i := range reps {
		streams[i] = &frameStream{r: &reps[i]}
		defer streams[i].close()
		same[i] = true
	}
	// skip returns the first frame of s whose last offset is at or past from.
	skip := func(s *frameStream) []byte {
		for {
			b := s.next()
			if b == nil {
				return nil
			}
			if h := parseHeader(b); h.NextOffset() > from {
				return b
			}
		}
	}
	cur := make([][]byte, len(reps))
	for i, s := range streams {
		cur[i] = skip(s)
	}
	for {
		walked := 0
		for i, s := range streams {
			if !same[i] {
				continue
			}
			walked++
			if s.err != nil {
				diff(s.r, &reps[0], rng.To, "read segments: %v", s.err)
				same[i] = false
				return same
			}
			if cur[i] == nil {
				return same // the common prefix ends here
			}
		}
		if walked == 1 {
			return same // every other replica differed
		}
		ref := cur[0]
		rh := parseHeader(ref)
		for i := 1; i < len(reps); i++ {
			if !same[i] || bytes.Equal(cur[i], ref) {
				continue
			}
			h := parseHeader(cur[i])
			what := "batch bytes differ"
			if h.BaseOffset != rh.BaseOffset || h.NextOffset() != rh.NextOffset() {
				what = fmt.Sprintf("batch [%d, %d), reference [%d, %d)", h.BaseOffset, h.NextOffset(), rh.BaseOffset, rh.NextOffset())
			}
			diff(&reps[i], &reps[0], min(h.BaseOffset, rh.BaseOffset), "%s", what)
			same[i] = false
		}
		rng.To = rh.NextOffset()
		rng.Batches++
		rng.Bytes += int64(len(ref))
		for i, s := range streams {
			if same[i] {
				cur[i] = s.next()
			}
		}
	}
}

// compareEpochs compares the leader-epoch index entries covering [from, to).
func compareEpochs(reps []replicaChannel, from, to int64, diff func(r, ref *replicaChannel, off int64, format string, args ...any)) {
	clip := func(r *replicaChannel) ([]epochEntry, bool) {
		es, ok, err := readEpochFile(r.dir)
		if err != nil {
			diff(r, &reps[0], -1, "%v", err)
			return nil, false
		}
		if !ok {
			return nil, false // rebuilt from the batches at start
		}
		var out []epochEntry
		for i, e := range es {
			if e.start >= to || i+1 < len(es) && es[i+1].start <= from {
				continue
			}
			out = append(out, epochEntry{epoch: e.epoch, start: max(e.start, from)})
		}
		return out, true
	}
	ref, ok := clip(&reps[0])
	if !ok {
		return
	}
	for i := 1; i < len(reps); i++ {
		es, ok := clip(&reps[i])
		if !ok || slices.Equal(es, ref) {
			continue
		}
		off := to
		for j := 0; j < len(es) || j < len(ref); j++ {
			if j >= len(es) || j >= len(ref) || es[j] != ref[j] {
				if j < len(es) {
					off = es[j].start
				}
				if j < len(ref) {
					off = min(off, ref[j].start)
				}
				break
			}
		}
		diff(&reps[i], &reps[0], off, "leader epochs %v, reference %v", es, ref)
	}
}

// compareIndexes compares the index files of the sealed segments r and ref both hold
// at the same base inside [from, to) with the same bytes.
func compareIndexes(ref, r *replicaChannel, from, to int64, diff func(r, ref *replicaChannel, off int64, format string, args ...any)) {
	for i, b := range ref.bases[:max(len(ref.bases)-1, 0)] {
		j, found := slices.BinarySearch(r.bases, b)
		if !found || j == len(r.bases)-1 || b < from || ref.bases[i+1] > to || r.bases[j+1] != ref.bases[i+1] {
			continue
		}
		if !sameFile(filepath.Join(ref.dir, segmentName(b, ".log")), filepath.Join(r.dir, segmentName(b, ".log"))) {
			continue
		}
		for _, ext := range []string{".index", ".timeindex"} {
			x, err1 := os.ReadFile(filepath.Join(ref.dir, segmentName(b, ext)))
			y, err2 := os.ReadFile(filepath.Join(r.dir, segmentName(b, ext)))
			if err1 == nil && err2 == nil && !bytes.Equal(x, y) {
				diff(r, ref, b, "%s of segment %d differs (%d bytes, reference %d)", ext, b, len(y), len(x))
			}
		}
	}
}

// sameFile reports whether files a and b can be read and hold the same bytes.
func sameFile(a, b string) bool {
	sum := func(p string) ([]byte, bool) {
		f, err := os.Open(p)
		if err != nil {
			return nil, false
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return nil, false
		}
		return h.Sum(nil), true
	}
	x, ok1 := sum(a)
	y, ok2 := sum(b)
	return ok1 && ok2 && bytes.Equal(x, y)
}

// compareSnapshots compares the producer snapshots the replicas hold at the same
// base at or below to (each keeps the one of its active segment). Aborted
// transactions whose marker is below from are left out: a replica's cleaner drops
// the entry of one whose batches it removed (dropAborted), each on its own segments.
func compareSnapshots(reps []replicaChannel, from, to int64, diff func(r, ref *replicaChannel, off int64, format string, args ...any)) {
	state := func(r *replicaChannel) (int64, string, bool) {
		if len(r.bases) == 0 {
			return 0, "", false
		}
		b := r.bases[len(r.bases)-1]
		data, err := os.ReadFile(filepath.Join(r.dir, snapshotName(b)))
		if err != nil || b > to {
			return 0, "", false
		}
		ps, t, err := decodeSnapshot(data)
		if err != nil {
			diff(r, &reps[0], b, "producer snapshot %d: %v", b, err)
			return 0, "", false
		}
		return b, producerStateText(ps, t, from), true
	}
	rb, rs, ok := state(&reps[0])
	if !ok {
		return
	}
	for i := 1; i < len(reps); i++ {
		b, s, ok := state(&reps[i])
		if ok && b == rb && s != rs {
			diff(&reps[i], &reps[0], b, "producer state at %d: %s, reference %s", b, s, rs)
		}
	}
}

// producerStateText renders ps and t in a canonical order, without last-append times
// and without the aborted transactions whose marker is below from.
func producerStateText(ps producers, t *txnState, from int64) string {
	var sb strings.Builder
	pids := make([]int64, 0, len(ps))
	for pid := range ps {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		st := ps[pid]
		fmt.Fprintf(&sb, "producer %d epoch %d coordinator epoch %d batches %v; ", pid, st.epoch, st.coordEpoch, st.batches[:st.n])
	}
	if t != nil {
		open := make([][2]int64, 0, len(t.open))
		for pid, first := range t.open {
			open = append(open, [2]int64{pid, first})
		}
		slices.SortFunc(open, func(a, b [2]int64) int { return int(a[0] - b[0]) })
		var aborted []abortedTxn
		for _, a := range t.aborted {
			if a.last >= from {
				aborted = append(aborted, a)
			}
		}
		if len(open) > 0 || len(aborted) > 0 { // as no transaction state at all
			fmt.Fprintf(&sb, "open %v aborted %v", open, aborted)
		}
	}
	return sb.String()
}
