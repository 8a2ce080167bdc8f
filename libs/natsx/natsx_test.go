package natsx

import (
	"strings"
	"testing"
)

func TestQueueChangedSubject(t *testing.T) {
	s := QueueChangedSubject("c1", "gcp.sub.a.b~c%d")
	tok, ok := strings.CutPrefix(s, QueueChangedPrefix("c1"))
	if !ok || strings.ContainsAny(tok, ".*> \t") || len(tok) != 32 {
		t.Fatalf("subject %q: token %q is not one 32-character NATS token", s, tok)
	}
	if tok != QueueToken("gcp.sub.a.b~c%d") || tok == QueueToken("gcp.sub.a.b~c%e") {
		t.Fatalf("token %q does not identify the queue", tok)
	}
	if QueueChangedPrefix("c1") != "tributary.c1.queues.changed." {
		t.Fatalf("prefix %q", QueueChangedPrefix("c1"))
	}
}

func TestSubjects(t *testing.T) {
	if got := TopicsChangedSubject("c1"); got != "tributary.c1.topics.changed" {
		t.Fatalf("TopicsChangedSubject = %q", got)
	}
	if got := BrokersSubject("c1"); got != "tributary.c1.kafka.brokers" {
		t.Fatalf("BrokersSubject = %q", got)
	}
	s := GroupChangedSubject("c1", "a group.with*odd>chars")
	tok, ok := strings.CutPrefix(s, "tributary.c1.groups.changed.")
	if !ok || tok != GroupToken("a group.with*odd>chars") || len(tok) != 32 || strings.ContainsAny(tok, ".*> \t") {
		t.Fatalf("GroupChangedSubject = %q", s)
	}
	if got := SweepLockBucket("e2e-1_x.y"); got != "tributary_e2e-1_x_y_sweeps" {
		t.Fatalf("SweepLockBucket = %q", got)
	}
	if GroupChangedPrefix("c1")+tok != s {
		t.Fatalf("prefix %q does not lead subject %q", GroupChangedPrefix("c1"), s)
	}
}
