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
