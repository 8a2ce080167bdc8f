package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setShareGroupConfigs sets GROUP configs of group (IncrementalAlterConfigs SET).
func setShareGroupConfigs(t *testing.T, cl *kgo.Client, group string, kv ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i+1 < len(kv); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = kv[i], kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr(kv[i+1])
		r.Configs = append(r.Configs, c)
	}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctxT(t, 30*time.Second), cl)
	if err != nil || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("IncrementalAlterConfigs %s %v: %+v %v", group, kv, resp, err)
	}
}

// TestShareIsolationLevel: a kgo transactional producer commits, aborts and commits
// into a topic; a kgo share consumer of a group at share.isolation.level=
// read_committed gets exactly the committed records, one of a group at the default
// read_uncommitted every data record, and neither gets a transaction marker: a
// ShareFetch's AcquiredRecords never cover a marker's offset.
func TestShareIsolationLevel(t *testing.T) {
	s := sharedStack(t)
	adm := kadm.NewClient(newClient(t, s.KafkaAddrs))
	topic := topicName("shareiso")
	createTopic(t, adm, topic, 1, nil)
	ctx := ctxT(t, 2*time.Minute)

	tx := newClient(t, s.KafkaAddrs, kgo.TransactionalID(topicName("shareiso-tx")), kgo.DefaultProduceTopic(topic))
	txn := func(commit bool, values ...string) {
		t.Helper()
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if err := tx.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, "c0", "c1")  // 0-1, COMMIT at 2
	txn(false, "a3", "a4") // 3-4, ABORT at 5
	txn(true, "c6")        // 6, COMMIT at 7
	txn(false, "a8")       // 8, ABORT at 9
	txn(true, "end10")     // 10, COMMIT at 11
	markers := []int64{2, 5, 7, 9, 11}

	// consume reads group's records with a kgo share consumer, accepting each, until
	// end10; it returns the values and offsets in delivery order.
	consume := func(group string) ([]string, []int64) {
		t.Helper()
		cl := newClient(t, s.KafkaAddrs, kgo.ShareGroup(group), kgo.ConsumeTopics(topic))
		var vals []string
		var offs []int64
		for !slices.Contains(vals, "end10") {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%s: got %v at %v before the deadline", group, vals, offs)
			}
			for _, e := range fs.Errors() {
				t.Fatalf("%s: fetch error %v", group, e)
			}
			for _, r := range fs.Records() {
				vals, offs = append(vals, string(r.Value)), append(offs, r.Offset)
				r.Ack(kgo.AckAccept)
			}
		}
		if err := cl.FlushAcks(ctx); err != nil {
			t.Fatalf("%s: FlushAcks: %v", group, err)
		}
		return vals, offs
	}

	rc, ru := topicName("shareiso-rc"), topicName("shareiso-ru")
	setShareGroupConfigs(t, tx, rc, "share.auto.offset.reset", "earliest", "share.isolation.level", "read_committed")
	setShareGroupConfigs(t, tx, ru, "share.auto.offset.reset", "earliest")
	if v, o := consume(rc); !slices.Equal(v, []string{"c0", "c1", "c6", "end10"}) || !slices.Equal(o, []int64{0, 1, 6, 10}) {
		t.Errorf("read_committed got %v at %v, want c0 c1 c6 end10 at 0 1 6 10", v, o)
	}
	if v, o := consume(ru); !slices.Equal(v, []string{"c0", "c1", "a3", "a4", "c6", "a8", "end10"}) || !slices.Equal(o, []int64{0, 1, 3, 4, 6, 8, 10}) {
		t.Errorf("read_uncommitted got %v at %v, want every data record", v, o)
	}

	// On the wire: the acquired ranges of either level never cover a marker.
	id := topicID(t, adm, topic)
	for _, iso := range []string{"read_committed", "read_uncommitted"} {
		group := topicName("shareiso-raw")
		setShareGroupConfigs(t, tx, group, "share.auto.offset.reset", "earliest", "share.isolation.level", iso)
		m := newShareMember(t, s.KafkaAddrs, group, "raw-"+iso, id)
		var got []acquired
		for len(got) == 0 || got[len(got)-1].value != "end10" {
			if ctx.Err() != nil {
				t.Fatalf("%s: acquired %v before the deadline", iso, got)
			}
			recs, _ := records(t, m.fetch([]int32{0}, nil, 500))
			got = append(got, recs...)
		}
		for _, a := range got {
			if slices.Contains(markers, a.offset) {
				t.Errorf("%s: marker offset %d acquired (%+v)", iso, a.offset, got)
			}
		}
	}
}
