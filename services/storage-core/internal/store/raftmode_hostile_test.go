package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRaftHostileDeleteRecordsRace: DeleteRecords(-1) and DeleteRecords(n) race
// appends on the leader while the leader is stopped mid-way; the survivors and the
// restarted old leader end at one log start with identical bytes above it.
func TestRaftHostileDeleteRecordsRace(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.race")
	lead := c.leader(group)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var appended atomic.Int64
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				id := c.leaderNoFail(group)
				s := c.getStore(id)
				if s == nil {
					continue
				}
				l, err := s.Get("raft.race")
				if err != nil {
					continue
				}
				if _, err := l.AppendBatches(kbatch(t, batchOpt{}, fmt.Sprintf("w%d-%d", w, i))); err == nil {
					appended.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			id := c.leaderNoFail(group)
			s := c.getStore(id)
			if s == nil {
				continue
			}
			l, err := s.Get("raft.race")
			if err != nil {
				continue
			}
			before := int64(-1)
			if i%2 == 1 {
				before = l.HighWatermark() - 1
			}
			_, _ = l.DeleteRecords(before)
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	c.mu.Lock()
	c.stop(lead)
	c.mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	c.mu.Lock()
	c.start(lead)
	c.mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("%d appends", appended.Load())
	// Every node: same high watermark, same log start, same bytes from it.
	c.eventually(func() error {
		var hw, start int64 = -1, -1
		var ref []byte
		for id, s := range c.st {
			l, err := s.Get("raft.race")
			if err != nil {
				return err
			}
			if hw >= 0 && (l.HighWatermark() != hw || l.LogStart() != start) {
				return fmt.Errorf("node %d hw %d start %d; another node hw %d start %d", id, l.HighWatermark(), l.LogStart(), hw, start)
			}
			hw, start = l.HighWatermark(), l.LogStart()
			b, err := l.ReadRaw(start, 64<<20)
			if err != nil && !(errors.Is(err, ErrOutOfRange) && start == hw) {
				return fmt.Errorf("node %d read from %d: %v", id, start, err)
			}
			if ref != nil && !bytes.Equal(b, ref) {
				return fmt.Errorf("node %d bytes differ from another's", id)
			}
			ref = b
		}
		return nil
	})
	// A restart of every node in turn rebuilds the same log start.
	var want int64
	for _, s := range c.st {
		l, _ := s.Get("raft.race")
		want = l.LogStart()
	}
	for id := uint64(1); id <= 3; id++ {
		c.stop(id)
		c.start(id)
		c.eventually(func() error {
			l, err := c.st[id].Get("raft.race")
			if err != nil {
				return err
			}
			if l.LogStart() != want {
				return fmt.Errorf("restarted node %d log start %d, want %d", id, l.LogStart(), want)
			}
			return nil
		})
	}
}

// TestRaftHostileBarrierFlood: writes naming channels that do not exist each cost
// the metadata leader a barrier entry; count them, and how appends to a real
// channel fare meanwhile.
func TestRaftHostileBarrierFlood(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.real")
	meta := c.leader(metaGroup)
	ms := c.st[meta]
	hs0, _ := ms.raft.w.HardState(metaGroup)
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.real")
	appends := func(d time.Duration) int {
		n := 0
		for end := time.Now().Add(d); time.Now().Before(end); n++ {
			mustAppend(t, ll, kbatch(t, batchOpt{}, "x"))
		}
		return n
	}
	quiet := appends(time.Second)
	var stop atomic.Bool
	var calls atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if _, err := ms.GetConfirmed(fmt.Sprintf("kafka.nosuch-%d-%d", w, i)); !errors.Is(err, ErrNotFound) {
					t.Errorf("GetConfirmed: %v", err)
					return
				}
				calls.Add(1)
			}
		}()
	}
	flooded := appends(time.Second)
	stop.Store(true)
	wg.Wait()
	hs1, _ := ms.raft.w.HardState(metaGroup)
	t.Logf("appends/s quiet %d, flooded %d; %d GetConfirmed calls added %d metadata entries", quiet, flooded, calls.Load(), hs1.Commit-hs0.Commit)
	if entries := hs1.Commit - hs0.Commit; entries > uint64(calls.Load())/4+10 {
		t.Errorf("%d absent-channel lookups wrote %d metadata entries: one per lookup", calls.Load(), entries)
	}
}

// TestRaftHostileGetConfirmedNoQuorum: with the metadata leader cut off from both
// peers, GetConfirmed of an absent channel ends within the propose timeout with a
// clear error.
func TestRaftHostileGetConfirmedNoQuorum(t *testing.T) {
	c := newRaftCluster(t)
	c.create("raft.q")
	meta := c.leader(metaGroup)
	for id := range c.st {
		if id != meta {
			c.stop(id)
		}
	}
	t0 := time.Now()
	_, err := c.st[meta].GetConfirmed("raft.absent")
	d := time.Since(t0)
	t.Logf("GetConfirmed without quorum: %v after %v", err, d)
	if !errors.Is(err, ErrNotReplicated) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("GetConfirmed without quorum: %v, want ErrNotReplicated or ErrNotLeader", err)
	}
	if d > 4*time.Second {
		t.Fatalf("GetConfirmed took %v, propose timeout 3s", d)
	}
	if l, err := c.st[meta].GetConfirmed("raft.q"); err != nil || l == nil {
		t.Fatalf("GetConfirmed of a held channel without quorum: %v", err)
	}
}

// leaderNoFail is the leader of group as a live node knows it (0: none), safe
// against concurrent stop and start under c.mu.
func (c *raftCluster) leaderNoFail(group uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.st {
		if l, _, _, err := s.raft.node.Leader(group); err == nil && l != 0 && c.st[l] != nil {
			return l
		}
	}
	return 0
}

func (c *raftCluster) getStore(id uint64) *Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st[id]
}

// TestRaftHostileCompactedTxnFailover: a compacted channel with committed and aborted
// transactions on a raft cluster. Only the leader cleans; then it stops, the new
// leader takes more transactions and cleans, and the old one comes back (resuming
// from its checkpoint, with the segments it cleaned). Every node agrees on the high
// watermark, the LSO and, in its read_committed view, on the newest value of every
// key; what a node's view holds at an offset is what the view of the node that has not
// cleaned yet held there.
func TestRaftHostileCompactedTxnFailover(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.ctxn")
	ml, _ := c.st[c.leader(metaGroup)].Get("raft.ctxn")
	if err := ml.UpdateConfigFields(ChannelConfig{CleanupPolicy: CleanupCompact, SegmentBytes: 600, DeleteRetentionMs: 0, MinCleanableDirtyRatio: -1},
		[]string{"cleanup_policy", "segment_bytes", "delete_retention_ms", "min_cleanable_dirty_ratio"}); err != nil {
		t.Fatal(err)
	}
	c.eventually(func() error {
		for id, s := range c.st {
			if l, _ := s.Get("raft.ctxn"); !l.Config().Compacted() || l.Config().SegmentBytes != 600 {
				return fmt.Errorf("node %d config not applied yet", id)
			}
		}
		return nil
	})
	seqs := map[int64]int32{}
	write := func(l *Log, pid int64, commit bool, recs ...kv) {
		t.Helper()
		mustAppend(t, l, kvBatch(t, batchOpt{pid: pid, seq: seqs[pid], txn: true}, recs...))
		seqs[pid] += int32(len(recs))
		if _, err := l.WriteTxnMarker(TxnMarker{ProducerID: pid, Commit: commit}); err != nil {
			t.Fatal(err)
		}
	}
	plain := func(l *Log, prefix string, n int) {
		for i := range n {
			mustAppend(t, l, kvBatch(t, batchOpt{}, kv{key: fmt.Sprintf("%s%d", prefix, i%5), value: fmt.Sprintf("%s-%d", prefix, i)}))
		}
	}
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.ctxn")
	write(ll, 7, false, kv{key: "a", value: "a-aborted"}, kv{key: "b", value: "b-aborted"})
	write(ll, 8, true, kv{key: "a", value: "a-1"}, kv{key: "c", value: "c-1"})
	plain(ll, "g", 10)
	write(ll, 9, true, kv{key: "a", value: "a-2"})
	write(ll, 7, false, kv{key: "c", value: "c-aborted"})
	plain(ll, "h", 20)
	hw := ll.HighWatermark()
	c.sameBytes("raft.ctxn", hw)
	if err := c.st[lead].RunRaftCheckpoint(); err != nil { // the cleaner stays below it
		t.Fatal(err)
	}
	for range 3 {
		c.st[lead].RunCleaner()
	}
	rawLen := func(id uint64) int {
		l, _ := c.st[id].Get("raft.ctxn")
		b, err := l.ReadRaw(0, 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	for id := range c.st {
		if id != lead && rawLen(id) <= rawLen(lead) {
			t.Fatalf("the leader's cleaner removed nothing: %d bytes, follower %d %d", rawLen(lead), id, rawLen(id))
		}
	}
	c.stop(lead)
	lead2 := c.leader(group)
	l2, _ := c.st[lead2].Get("raft.ctxn")
	c.eventually(func() error {
		if l2.HighWatermark() != hw {
			return fmt.Errorf("new leader high watermark %d, want %d", l2.HighWatermark(), hw)
		}
		return nil
	})
	write(l2, 10, false, kv{key: "a", value: "a-aborted2"})
	write(l2, 11, true, kv{key: "b", value: "b-1"})
	plain(l2, "i", 20)
	for range 3 {
		c.st[lead2].RunCleaner()
	}
	c.start(lead)
	hw2 := l2.HighWatermark()
	c.eventually(func() error {
		for id, s := range c.st {
			l, err := s.Get("raft.ctxn")
			if err != nil {
				return err
			}
			if l.HighWatermark() != hw2 || l.LastStable() != hw2 {
				return fmt.Errorf("node %d hw %d LSO %d, want %d", id, l.HighWatermark(), l.LastStable(), hw2)
			}
		}
		return nil
	})
	// The node that has not run its cleaner yet is the reference for every offset (the
	// restarted one keeps the segments it cleaned before its stop).
	third := uint64(0)
	for id := range c.st {
		if id != lead && id != lead2 {
			third = id
		}
	}
	rl, _ := c.st[third].Get("raft.ctxn")
	ref, _ := committedView(t, rl)
	newest := func(view map[int64]string) map[string]int64 {
		out := map[string]int64{}
		for off, v := range view {
			k := v[:bytes.IndexByte([]byte(v), '=')]
			if o, ok := out[k]; !ok || off > o {
				out[k] = off
			}
		}
		return out
	}
	wantNewest := newest(ref)
	if ref[wantNewest["a"]] != "a=a-2" || ref[wantNewest["b"]] != "b=b-1" || ref[wantNewest["c"]] != "c=c-1" {
		t.Fatalf("uncleaned read_committed newest a, b, c: %q %q %q", ref[wantNewest["a"]], ref[wantNewest["b"]], ref[wantNewest["c"]])
	}
	for id, s := range c.st {
		l, _ := s.Get("raft.ctxn")
		for range 3 {
			s.RunCleaner()
		}
		view, _ := committedView(t, l)
		for off, v := range view {
			if ref[off] != v {
				t.Errorf("node %d offset %d reads %q, uncleaned %q", id, off, v, ref[off])
			}
		}
		for k, off := range newest(view) {
			if off != wantNewest[k] {
				t.Errorf("node %d newest %s at %d, want %d", id, k, off, wantNewest[k])
			}
		}
		if len(newest(view)) != len(wantNewest) {
			t.Errorf("node %d has %d keys, want %d", id, len(newest(view)), len(wantNewest))
		}
	}
}

// TestRaftHostileDeleteRecordsOpenTxn: DeleteRecords(-1) past an open transaction's
// first offset, then its marker: every replica, and each after a restart, agrees on
// the log start, the LSO and the aborted index.
func TestRaftHostileDeleteRecordsOpenTxn(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.otxn")
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.otxn")
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 5, epoch: 1, seq: 0, txn: true}, "t0", "t1")) // 0-1
	mustAppend(t, ll, kbatch(t, batchOpt{}, "p2"))                                          // 2
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 6, epoch: 1, seq: 0, txn: true}, "u3"))       // 3
	if got, err := ll.DeleteRecords(-1); err != nil || got != 4 {
		t.Fatalf("DeleteRecords(-1): %d %v, want 4", got, err)
	}
	mustMarker(t, ll, TxnMarker{ProducerID: 5, ProducerEpoch: 1})                     // 4: abort
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 6, epoch: 1, seq: 1, txn: true}, "u5")) // 5
	mustMarker(t, ll, TxnMarker{ProducerID: 6, ProducerEpoch: 1, Commit: true})       // 6
	state := func(l *Log) string {
		return fmt.Sprintf("start %d hw %d lso %d aborted %+v", l.LogStart(), l.HighWatermark(), l.LastStable(), l.AbortedTxns(0, l.HighWatermark()))
	}
	want := state(ll)
	t.Logf("leader: %s", want)
	same := func() {
		t.Helper()
		c.eventually(func() error {
			for id, s := range c.st {
				l, err := s.Get("raft.otxn")
				if err != nil {
					return err
				}
				if got := state(l); got != want {
					return fmt.Errorf("node %d: %s, leader had %s", id, got, want)
				}
			}
			return nil
		})
	}
	same()
	for id := uint64(1); id <= 3; id++ {
		c.stop(id)
		c.start(id)
		same()
	}
}

// TestRaftHostileConfigReplayOrder: a channel entry is applied alike whatever config
// a replica holds at that moment. Config changes are metadata group entries, applied
// apart from the channel's own group (and, at a start, replayed ahead of it), so
// records written under timestamp_type LogAppendTime, then null-key records, then the
// channel made compacted (which refuses null keys) with a small max_message_bytes,
// must all be rebuilt by every restarted replica at the same offsets, byte for byte.
func TestRaftHostileConfigReplayOrder(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.cfgorder")
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.cfgorder")
	setConfig := func(cfg ChannelConfig, mask ...string) {
		t.Helper()
		ml, _ := c.st[c.leader(metaGroup)].Get("raft.cfgorder")
		if err := ml.UpdateConfigFields(cfg, mask); err != nil {
			t.Fatal(err)
		}
		want := ml.Config()
		c.eventually(func() error {
			for id, s := range c.st {
				if l, _ := s.Get("raft.cfgorder"); l.Config() != want {
					return fmt.Errorf("node %d config not applied yet", id)
				}
			}
			return nil
		})
	}
	setConfig(ChannelConfig{TimestampType: TimestampLogAppendTime}, "timestamp_type")
	for i := 0; i < 10; i++ {
		mustAppend(t, ll, kbatch(t, batchOpt{}, fmt.Sprintf("lat%d", i)))
	}
	mustAppend(t, ll, kbatch(t, batchOpt{pid: 3, seq: 0, txn: true}, "txn10"))
	mustMarker(t, ll, TxnMarker{ProducerID: 3, Commit: true}) // 11
	setConfig(ChannelConfig{TimestampType: TimestampCreateTime}, "timestamp_type")
	for i := 0; i < 40; i++ {
		mustAppend(t, ll, EncodeBatch([]NewRecord{{Value: []byte(fmt.Sprintf("v%d-%s", i, strings.Repeat("x", 200)))}}, time.Now().UnixMilli())) // a null key
	}
	c.sameBytes("raft.cfgorder", 52)
	setConfig(ChannelConfig{CleanupPolicy: CleanupCompact, MaxMessageBytes: 100}, "cleanup_policy", "max_message_bytes")
	for id := uint64(1); id <= 3; id++ {
		c.stop(id)
		c.start(id)
		c.sameBytes("raft.cfgorder", 52)
	}
}

// TestRaftHostileConfigRacesAppends: config changes (compacted or not, timestamp
// type, max_message_bytes) race null-key appends of several sizes; whatever the
// leader accepted, every replica holds the same bytes, also once restarted.
func TestRaftHostileConfigRacesAppends(t *testing.T) {
	c := newRaftCluster(t)
	group := c.create("raft.cfgrace")
	lead := c.leader(group)
	ll, _ := c.st[lead].Get("raft.cfgrace")
	ml, _ := c.st[c.leader(metaGroup)].Get("raft.cfgrace")
	var stop atomic.Bool
	var changes atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfgs := []ChannelConfig{
			{CleanupPolicy: CleanupCompact, TimestampType: TimestampLogAppendTime, MaxMessageBytes: 300},
			{CleanupPolicy: CleanupDelete, TimestampType: TimestampCreateTime, MaxMessageBytes: 1 << 20},
		}
		failures := 0
		for i := 0; !stop.Load(); i++ {
			if err := ml.UpdateConfigFields(cfgs[i%2], []string{"cleanup_policy", "timestamp_type", "max_message_bytes"}); err != nil {
				// On a loaded machine the metadata group can change leader: go on
				// with the new one.
				if failures++; failures > 5 {
					t.Errorf("config change, %d failures: %v", failures, err)
					return
				}
				t.Logf("config change: %v", err)
				ml, _ = c.st[c.leader(metaGroup)].Get("raft.cfgrace")
				continue
			}
			changes.Add(1)
		}
	}()
	// The race runs until both sides have done enough (at least 1.5 s), however slow
	// the machine: 40 accepted appends and 20 config changes, or 60 s.
	accepted := 0
	start := time.Now()
	raced := func() bool {
		return time.Since(start) > 1500*time.Millisecond && accepted >= 40 && changes.Load() >= 20 || time.Since(start) > time.Minute
	}
	for i := 0; !raced(); i++ {
		v := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i%3*150))
		if _, err := ll.AppendBatches(EncodeBatch([]NewRecord{{Value: []byte(v)}}, time.Now().UnixMilli())); err == nil {
			accepted++
		} else {
			time.Sleep(200 * time.Microsecond) // a refusal costs no round trip
		}
	}
	stop.Store(true)
	<-done
	t.Logf("%d appends accepted, %d config changes", accepted, changes.Load())
	if accepted < 40 || changes.Load() < 20 {
		t.Fatalf("only %d appends accepted and %d config changes in %v: the race did not run", accepted, changes.Load(), time.Since(start))
	}
	c.sameBytes("raft.cfgrace", int64(accepted))
	c.restartFollower(lead)
	c.sameBytes("raft.cfgrace", int64(accepted))
}

// TestRaftHostileGetConfirmedAll: one lookup of many absent channels and a present
// one costs the metadata group one barrier entry, answers each absent channel
// ErrNotFound and the present one its log; on a follower the absent ones are
// ErrNotLeader.
func TestRaftHostileGetConfirmedAll(t *testing.T) {
	c := newRaftCluster(t)
	c.create("raft.here")
	meta := c.leader(metaGroup)
	ms := c.st[meta]
	names := []string{"raft.here"}
	for i := 0; i < 1000; i++ {
		names = append(names, fmt.Sprintf("kafka.gone-%d", i))
	}
	hs0, _ := ms.raft.w.HardState(metaGroup)
	logs, errs := ms.GetConfirmedAll(names)
	hs1, _ := ms.raft.w.HardState(metaGroup)
	if logs[0] == nil || errs[0] != nil || logs[0].Name() != "raft.here" {
		t.Fatalf("present channel: %v %v", logs[0], errs[0])
	}
	for i := 1; i < len(names); i++ {
		if !errors.Is(errs[i], ErrNotFound) || logs[i] != nil {
			t.Fatalf("%s: %v %v, want ErrNotFound", names[i], logs[i], errs[i])
		}
	}
	if d := hs1.Commit - hs0.Commit; d > 2 {
		t.Fatalf("one lookup of 1000 absent channels wrote %d metadata entries, want 1", d)
	}
	for id, s := range c.st {
		if id == meta {
			continue
		}
		_, errs := s.GetConfirmedAll(names[:3])
		if errs[0] != nil || !errors.Is(errs[1], ErrNotLeader) || !errors.Is(errs[2], ErrNotLeader) {
			t.Fatalf("follower %d: %v, want nil and ErrNotLeader", id, errs)
		}
	}
}

// TestRaftEntryTimestampFlags: an applied append is stamped with the append time as
// its entry's flag says, whatever the replica's config; an entry without either flag
// (written before they existed) by the replica's config, as then.
func TestRaftEntryTimestampFlags(t *testing.T) {
	clk := &clock{}
	clk.ms.Store(1_000_000)
	s := openStore(t, t.TempDir(), clk)
	defer func() { _ = s.Close() }()
	lat := mustCreate(t, s, "lat", ChannelConfig{TimestampType: TimestampLogAppendTime})
	ct := mustCreate(t, s, "ct", ChannelConfig{TimestampType: TimestampCreateTime})
	entry := func(flags byte) []byte {
		b := kbatch(t, batchOpt{}, "v")
		p := make([]byte, 10+len(b))
		p[0], p[1] = cmdRaftBatches, flags
		binary.BigEndian.PutUint64(p[2:], 12345)
		copy(p[10:], b)
		return p
	}
	for _, tc := range []struct {
		l     *Log
		flags byte
		want  int64
	}{
		{lat, flagCreateTime, -1},
		{lat, flagLogAppendTime, 12345},
		{ct, flagLogAppendTime, 12345},
		{ct, flagCreateTime, -1},
		{lat, 0, 12345}, // legacy: by the config
		{ct, 0, -1},
	} {
		res, err := (&logSM{l: tc.l}).Apply(1, 1, entry(tc.flags))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.(AppendResult).LogAppendTime; got != tc.want {
			t.Errorf("%s flags %d: log append time %d, want %d", tc.l.Name(), tc.flags, got, tc.want)
		}
	}
}
