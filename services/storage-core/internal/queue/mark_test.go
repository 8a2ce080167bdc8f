package queue

import (
	"os"
	"path/filepath"
	"testing"
)

// truncateTail cuts n bytes off the first segment of channel name under dir (the
// last batch torn, as a power loss with --fsync=interval may leave it).
func truncateTail(t *testing.T, dir, name string, n int64) {
	t.Helper()
	seg := filepath.Join(dir, "store", "channels", name, "00000000000000000000.log")
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, fi.Size()-n); err != nil {
		t.Fatal(err)
	}
}

// TestDeliveredMarkPastCutLogTail: messages delivered but not acked, then a crash
// cuts the tail of both the source and the queue log, while the binding's last
// checkpoint is older than the cut (so neither the floor, the acked spans, delivery
// records nor the checkpoint reach past the log's end): only the delivered mark does.
// The record the binding copies next takes a cut offset and was never delivered: it
// must come with delivery attempt 1, not 2.
func TestDeliveredMarkPastCutLogTail(t *testing.T) {
	e := newEnv(t)
	src := e.log("gcp.t")
	q := e.queue("gcp.sub.s", Config{}, Binding{Source: "gcp.t", StartSequence: 1})
	publish(t, src, "a")
	mustAck(t, q, ackIDs(receive(t, q, 10, 1))...) // the first copy is checkpointed at once
	publish(t, src, "b")                           // the next ones within a second are not
	receive(t, q, 10, 1)
	publish(t, src, "c")
	receive(t, q, 10, 1) // b and c delivered, not acked: the mark is at 3
	crashed := &env{t: t, dir: t.TempDir(), clk: e.clk}
	copyDir(t, e.dir, crashed.dir)
	truncateTail(t, crashed.dir, "gcp.t", 5)     // c is torn in the source
	truncateTail(t, crashed.dir, "gcp.sub.s", 5) // and in the queue log
	crashed.open()
	defer crashed.close()
	q, err := crashed.m.Get("gcp.sub.s")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, crashed.mustGet("gcp.t"), "d") // takes c's source sequence and queue offset
	got := map[string]int32{}
	for _, d := range receive(t, q, 10, 2) {
		got[string(d.Record.Value)] = d.Attempt
	}
	if got["b"] != 2 || got["d"] != 1 {
		t.Fatalf("attempts after the cut %v, want b 2 (delivered before), d 1 (new)", got)
	}
	crashed.restart()
	q, _ = crashed.m.Get("gcp.sub.s")
	got = map[string]int32{}
	for _, d := range receive(t, q, 10, 2) {
		got[string(d.Record.Value)] = d.Attempt
	}
	if got["b"] != 3 || got["d"] != 2 {
		t.Fatalf("attempts after a restart %v, want b 3, d 2", got)
	}
}
