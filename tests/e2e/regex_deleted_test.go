package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRegexConsumerTopicDeleted is franz-go's TestIssue523 scenario with our own
// checks: a group member subscribed by regex reads a one-partition topic, the topic is
// deleted under it, and the member must stop asking for it (PollFetches waits out a
// 4 s poll with no error within 40 s, as TestIssue523 requires; kgo drops a topic
// missing from Metadata after 15 s). Between the delete and that, the deleted topic is
// answered as Kafka answers it: absent from the all-topics Metadata,
// UNKNOWN_TOPIC_OR_PARTITION by name, UNKNOWN_TOPIC_ID for a Fetch by its old id, and
// UNKNOWN_TOPIC_OR_PARTITION for ListOffsets and OffsetCommit, and a group's committed
// offset of it is gone (OffsetFetch). Afterwards the group holds no partition of it
// (classic: the member's assignment; KIP-848: ConsumerGroupDescribe) and DeleteGroups
// succeeds once the member left. Classic
// groups with the roundrobin and sticky balancers (TestIssue523's) and a KIP-848
// group whose regex the coordinator resolves.
func TestRegexConsumerTopicDeleted(t *testing.T) {
	s := sharedStack(t)
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"roundrobin", []kgo.Opt{kgo.Balancers(kgo.RoundRobinBalancer())}},
		{"sticky", []kgo.Opt{kgo.Balancers(kgo.StickyBalancer())}},
		{"848", []kgo.Opt{kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adm := newAdmin(t, s.KafkaAddrs)
			raw := newClient(t, s.KafkaAddrs)
			topic, group := topicName("re523"), topicName("re523g")
			createTopic(t, adm, topic, 1, nil)
			td := waitTopic(t, adm, topic, 1)
			ctx := ctxT(t, 2*time.Minute)

			cl, err := kgo.NewClient(append([]kgo.Opt{
				kgo.SeedBrokers(s.KafkaAddrs...),
				kgo.DefaultProduceTopic(topic),
				kgo.ConsumeTopics(".*" + topic + ".*"), kgo.ConsumeRegex(),
				kgo.ConsumerGroup(group),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.MetadataMinAge(100 * time.Millisecond),
				kgo.FetchMaxWait(time.Second),
				kgo.KeepRetryableFetchErrors(),
				kgo.UnknownTopicRetries(-1),
			}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					cl.Close()
				}
			}()
			if err := cl.ProduceSync(ctx, kgo.StringRecord("foo")).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			if err := fs.Err0(); err != nil {
				t.Fatalf("first PollFetches: %v", err)
			}
			if n := fs.NumRecords(); n != 1 {
				t.Fatalf("first PollFetches: %d records, want 1", n)
			}

			// A simple (generation -1) commit of the topic, which its deletion removes.
			simple := topicName("re523simple")
			commitTo := func(offset int64) int16 {
				t.Helper()
				commit := kmsg.NewPtrOffsetCommitRequest()
				commit.Group, commit.Generation = simple, -1
				ct := kmsg.NewOffsetCommitRequestTopic()
				ct.Topic = topic
				cp := kmsg.NewOffsetCommitRequestTopicPartition()
				cp.Offset = offset
				ct.Partitions = append(ct.Partitions, cp)
				commit.Topics = append(commit.Topics, ct)
				cresp, err := commit.RequestWith(ctx, raw)
				if err != nil || len(cresp.Topics) != 1 || len(cresp.Topics[0].Partitions) != 1 {
					t.Fatalf("OffsetCommit: %v %+v", err, cresp)
				}
				return cresp.Topics[0].Partitions[0].ErrorCode
			}
			if code := commitTo(1); code != 0 {
				t.Fatalf("OffsetCommit before the delete: %v", kerr.ErrorForCode(code))
			}

			if resp, err := adm.DeleteTopics(ctx, topic); err != nil || resp[topic].Err != nil {
				t.Fatalf("DeleteTopics: %v %+v", err, resp)
			}
			deleted := time.Now()

			// Kafka's answers for the deleted topic.
			all := kmsg.NewPtrMetadataRequest()
			mresp, err := all.RequestWith(ctx, raw)
			if err != nil {
				t.Fatalf("Metadata: %v", err)
			}
			for _, mt := range mresp.Topics {
				if mt.Topic != nil && *mt.Topic == topic {
					t.Errorf("all-topics Metadata still lists the deleted topic: %v", kerr.ErrorForCode(mt.ErrorCode))
				}
			}
			byName := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			byName.Topics = append(byName.Topics, rt)
			byName.AllowAutoTopicCreation = false
			if mresp, err := byName.RequestWith(ctx, raw); err != nil || len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("Metadata by name of the deleted topic: %v %+v", err, mresp)
			}
			fetch := kmsg.NewPtrFetchRequest()
			fetch.Version = 13
			fetch.MaxWaitMillis, fetch.MaxBytes, fetch.ReplicaID = 100, 1<<20, -1
			ft := kmsg.NewFetchRequestTopic()
			ft.TopicID = td.ID
			fp := kmsg.NewFetchRequestTopicPartition()
			fp.PartitionMaxBytes = 1 << 20
			ft.Partitions = append(ft.Partitions, fp)
			fetch.Topics = append(fetch.Topics, ft)
			if fresp, err := fetch.RequestWith(ctx, raw); err != nil || len(fresp.Topics) != 1 || len(fresp.Topics[0].Partitions) != 1 ||
				fresp.Topics[0].Partitions[0].ErrorCode != kerr.UnknownTopicID.Code {
				t.Errorf("Fetch v13 by the deleted topic's id: %v %+v", err, fresp)
			}
			if lo, err := adm.ListEndOffsets(ctx, topic); err == nil {
				if o, ok := lo.Lookup(topic, 0); ok && !errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
					t.Errorf("ListOffsets of the deleted topic: %+v", o)
				}
			}
			if code := commitTo(2); code != kerr.UnknownTopicOrPartition.Code {
				t.Errorf("OffsetCommit for the deleted topic: %v", kerr.ErrorForCode(code))
			}
			// The topic's committed offsets went with it, as Kafka's group coordinator
			// deletes a deleted partition's offsets.
			if fo, err := adm.FetchOffsets(ctx, simple); err != nil {
				t.Errorf("OffsetFetch after the delete: %v", err)
			} else if o, ok := fo.Lookup(topic, 0); ok && o.At >= 0 {
				t.Errorf("group %s still has offset %d for the deleted topic", simple, o.At)
			}

			// TestIssue523's loop: the member stops asking for the deleted topic.
			polls, errPolls := 0, 0
			for {
				pctx, cancel := context.WithTimeout(ctx, 4*time.Second)
				fs := cl.PollFetches(pctx)
				cancel()
				polls++
				if errors.Is(fs.Err0(), context.DeadlineExceeded) {
					break
				}
				if time.Since(deleted) > 40*time.Second {
					t.Fatalf("still erroring 40 s after the delete (%d polls, %d with errors; last %v)", polls, errPolls, fs.Err0())
				}
				if fs.Err0() != nil {
					errPolls++
					time.Sleep(time.Second)
				}
			}
			t.Logf("%s: quiet %v after the delete (%d polls, %d with errors)", tc.name, time.Since(deleted).Round(100*time.Millisecond), polls, errPolls)

			// The group no longer assigns the deleted topic.
			waitUntil(t, ctx, "group assignment without the deleted topic", func() error {
				if tc.name == "848" {
					req := kmsg.NewPtrConsumerGroupDescribeRequest()
					req.Groups = []string{group}
					resp, err := req.RequestWith(ctx, raw)
					if err != nil {
						return err
					}
					g := resp.Groups[0]
					if g.ErrorCode != 0 || len(g.Members) != 1 {
						return fmt.Errorf("ConsumerGroupDescribe: %v %+v", kerr.ErrorForCode(g.ErrorCode), g)
					}
					if n := len(g.Members[0].Assignment.TopicPartitions) + len(g.Members[0].TargetAssignment.TopicPartitions); n != 0 {
						return fmt.Errorf("member still assigned %+v / target %+v", g.Members[0].Assignment, g.Members[0].TargetAssignment)
					}
					return nil
				}
				dg, err := adm.DescribeGroups(ctx, group)
				if err != nil {
					return err
				}
				g := dg[group]
				if g.Err != nil || len(g.Members) != 1 {
					return fmt.Errorf("DescribeGroups: %v %+v", g.Err, g)
				}
				if a, ok := g.Members[0].Assigned.AsConsumer(); !ok || len(a.Topics) != 0 {
					return fmt.Errorf("member still assigned %+v", a)
				}
				return nil
			})
			cl.Close()
			closed = true
			waitUntil(t, ctx, "DeleteGroups after the member left", func() error {
				resp, err := adm.DeleteGroups(ctx, group)
				if err != nil {
					return err
				}
				return resp[group].Err
			})
		})
	}
}
