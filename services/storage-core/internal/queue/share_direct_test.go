package queue

import (
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/tributary/tributary/libs/channel"
	"github.com/tributary/tributary/services/storage-core/internal/store"
)

// TestShareStateOffsetsOnly: a share partition keeps no log of its own and the
// engine's retention never trims its partition log; after a crash (the directory as
// fsynced, no close) the accepted offsets stay accepted, the acquired but
// unacknowledged ones come back with their delivery count raised, and the start
// offset is where the acknowledgements left it.
func TestShareStateOffsetsOnly(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	vals := make([]string, 10)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	publish(t, src, vals...)
	q := earliestSharePartition(t, e)
	if _, err := e.st.Get(q.Name()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("share partition has a log of its own: %v", err)
	}
	rs := shareFetch(t, e, "m1", 10, q)
	if got := shareOffsets(rs); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("acquired offsets %v", got)
	}
	// 0..3 and 6 accepted, 4, 5 and 7..9 still acquired at the crash.
	if err := q.ShareAck("m1", []ShareAckBatch{{First: 0, Last: 3, Types: []uint8{ShareAccept}}, ack(6, ShareAccept)}, 0); err != nil {
		t.Fatal(err)
	}
	if so, lag, err := q.ShareState(); err != nil || so != 4 || lag != 5 {
		t.Fatalf("start offset %d lag %d %v, want 4 and 5", so, lag, err)
	}
	e.m.Maintain()
	if start, hw := src.LogStart(), src.HighWatermark(); start != 0 || hw != 10 {
		t.Fatalf("partition log [%d, %d) after the queue engine's retention, want [0, 10)", start, hw)
	}

	crashed, q2 := crashCopyShare(t, e)
	if so, lag, err := q2.ShareState(); err != nil || so != 4 || lag != 5 {
		t.Fatalf("after the crash: start offset %d lag %d %v, want 4 and 5", so, lag, err)
	}
	again := shareFetch(t, crashed, "m2", 5, q2)
	if got := shareOffsets(again); !slices.Equal(got, []int64{4, 5, 7, 8, 9}) {
		t.Fatalf("after the crash acquired %v, want 4 5 7 8 9", got)
	}
	for _, r := range again {
		if r.DeliveryCount != 2 || string(r.Record.Value) != strconv.FormatInt(r.Record.Offset, 10) {
			t.Fatalf("offset %d: value %q count %d", r.Record.Offset, r.Record.Value, r.DeliveryCount)
		}
	}
}

// TestShareLogStartMoves: records the partition log no longer holds (DeleteRecords,
// retention) are never acquired: the share partition's start moves to the log's.
func TestShareLogStartMoves(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "0", "1", "2", "3", "4", "5")
	q := earliestSharePartition(t, e)
	if _, err := src.DeleteRecords(4); err != nil {
		t.Fatal(err)
	}
	rs := shareFetch(t, e, "m", 2, q)
	if got := shareOffsets(rs); !slices.Equal(got, []int64{4, 5}) {
		t.Fatalf("acquired %v after DeleteRecords(4), want 4 5", got)
	}
	if err := q.ShareAck("m", []ShareAckBatch{{First: 4, Last: 5, Types: []uint8{ShareAccept}}}, 0); err != nil {
		t.Fatal(err)
	}
	if so, lag, err := q.ShareState(); err != nil || so != 6 || lag != 0 {
		t.Fatalf("start offset %d lag %d %v, want 6 and 0", so, lag, err)
	}
}

// TestShareMigratesLegacyState: a share partition of the earlier layout (a queue log
// of its own copied by a binding) is converted at Open to one reading its partition
// log in place, at its start offset, with its delivery limit; its queue log is gone
// and the partition log is untouched.
func TestShareMigratesLegacyState(t *testing.T) {
	e := newEnv(t)
	src := e.log("kafka.t")
	publish(t, src, "0", "1", "2", "3", "4", "5")
	name, err := channel.KafkaSharePartition("g", "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := e.m.create(name, shareConfig(3), []Binding{{Source: "kafka.t", StartSequence: 1}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if q, err := e.m.SharePartition("g", "t", 0, false, ShareReset{}, 0); err != nil || q != old {
		t.Fatalf("the legacy queue is not the share partition's: %v", err)
	}
	rs := shareFetch(t, e, "m", 4, old)
	if got := shareOffsets(rs); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Fatalf("legacy acquired %v", got)
	}
	if err := old.ShareAck("m", []ShareAckBatch{{First: 0, Last: 2, Types: []uint8{ShareAccept}}}, 0); err != nil {
		t.Fatal(err)
	}
	e.restart()
	q, err := e.m.SharePartition("g", "t", 0, false, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q.share == nil || q.meta.Config.ArchiveAfter != 3 {
		t.Fatalf("not converted (share %v) or delivery limit %d, want 3", q.share, q.meta.Config.ArchiveAfter)
	}
	if _, err := e.st.Get(name); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("legacy queue log left: %v", err)
	}
	if so, lag, err := q.ShareState(); err != nil || so != 3 || lag != 3 {
		t.Fatalf("converted start offset %d lag %d %v, want 3 and 3", so, lag, err)
	}
	rs = shareFetch(t, e, "m", 3, q)
	if got := shareValues(rs); !slices.Equal(got, []string{"3", "4", "5"}) || !slices.Equal(shareOffsets(rs), []int64{3, 4, 5}) {
		t.Fatalf("converted acquired %v at %v", got, shareOffsets(rs))
	}
	if l := e.mustGet("kafka.t"); l.LogStart() != 0 || l.HighWatermark() != 6 {
		t.Fatalf("partition log [%d, %d)", l.LogStart(), l.HighWatermark())
	}
}

// earliestSharePartition creates group g's share partition of kafka.t partition 0,
// starting at the log start (share.auto.offset.reset=earliest).
func earliestSharePartition(t *testing.T, e *env) *Queue {
	t.Helper()
	q, err := e.m.SharePartition("g", "t", 0, true, ShareReset{Earliest: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// crashCopyShare opens a copy of e's directory as a kill -9 leaves it (what was
// written, no close) and returns it, closed at the test's end, with group g's share
// partition of kafka.t partition 0 in it.
func crashCopyShare(t *testing.T, e *env) (*env, *Queue) {
	t.Helper()
	crashed := &env{t: t, dir: t.TempDir(), clk: e.clk}
	copyDir(t, e.dir, crashed.dir)
	crashed.open()
	t.Cleanup(crashed.close)
	q, err := crashed.m.SharePartition("g", "t", 0, false, ShareReset{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return crashed, q
}
