package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKillStorageShareAcks: a share consumer accepts 200 of 300 records in rounds of
// 20 (ShareAcknowledge, each answered), and storage-core is killed with SIGKILL right
// after the last answer (those acks are then in the state journal only) and started
// again. Another member of the group then gets the 100 records never accepted, and
// never one whose ACCEPT was answered.
func TestKillStorageShareAcks(t *testing.T) {
	const n, accepted = 300, 200
	s := shareStack(t)
	pcl := newClient(t, s.KafkaAddrs, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(pcl)
	topic, group := topicName("sharekill"), topicName("sgrp")
	createTopic(t, adm, topic, 1, nil)
	tid := topicID(t, adm, topic)
	vals := make([]string, n)
	for i := range vals {
		vals[i] = fmt.Sprintf("r%d", i)
	}
	produceValues(t, pcl, topic, 0, vals...)

	a := newShareMember(t, s.KafkaAddrs, group, "member-a", tid)
	b := newShareMember(t, s.KafkaAddrs, group, "member-b", tid)
	held := map[int64]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for len(held) < n && time.Now().Before(deadline) {
		got, _ := records(t, a.fetch([]int32{0}, nil, 1000))
		for _, r := range got {
			held[r.offset] = true
		}
	}
	if len(held) < n {
		t.Fatalf("member a acquired %d of %d records", len(held), n)
	}
	for off := int64(0); off < accepted; off += 20 {
		var acks []ack
		for o := off; o < off+20; o++ {
			acks = append(acks, ack{0, o, 1})
		}
		if code, parts := a.acknowledge(acks); code != 0 || parts[0] != 0 {
			t.Fatalf("accept of %d..%d: %v %v", off, off+19, kerr.ErrorForCode(code), parts)
		}
	}
	if err := s.KillStorage(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := s.RestartStorage(ctxT(t, 60*time.Second)); err != nil {
		t.Fatalf("restart: %v", err)
	}

	// b never acknowledges: what it acquires comes back when its lock expires (2 s),
	// up to the delivery limit. A failed fetch starts a new session.
	seen := map[int64]bool{}
	b.epoch = 0
	var lastErr error
	deadline = time.Now().Add(90 * time.Second)
	for len(seen) < n-accepted && time.Now().Before(deadline) {
		resp, err := b.cl.Broker(0).Request(ctxT(t, 30*time.Second), b.fetchReq([]int32{0}, nil, 1000))
		if err == nil {
			if r := resp.(*kmsg.ShareFetchResponse); r.ErrorCode != 0 {
				err = kerr.ErrorForCode(r.ErrorCode)
			} else {
				b.next()
				var got []acquired
				if got, _, err = decodeShareFetch(r); err == nil {
					for _, rec := range got {
						if rec.offset < accepted {
							t.Fatalf("offset %d redelivered (count %d) after its ACCEPT was answered before the kill", rec.offset, rec.count)
						}
						seen[rec.offset] = true
					}
				}
			}
		}
		if err != nil {
			lastErr = err
			b.epoch = 0
			time.Sleep(200 * time.Millisecond)
		}
	}
	if len(seen) < n-accepted {
		t.Fatalf("after the restart member b got %d of the %d records never accepted (last error %v)", len(seen), n-accepted, lastErr)
	}
}
