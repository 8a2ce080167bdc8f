package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

// TestRegexSubscriptionACLs: KIP-848 regex subscriptions resolve only topics the
// member's principal may DESCRIBE (Kafka's filterTopicDescribeAuthorizedTopics). A
// SASL_PLAINTEXT gateway with the authorizer on; admin (a super user) creates topics
// <p>-eu and <p>-us and grants User:alice READ on the group and on <p>-eu only.
// alice's ConsumerGroupHeartbeat with regex <p>-.* is assigned <p>-eu's partitions
// and none of <p>-us; once admin grants her DESCRIBE on <p>-us her next heartbeats
// add its partitions. admin's own regex member in another group gets both at once.
func TestRegexSubscriptionACLs(t *testing.T) {
	testenv.Require(t)
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("admin:admin-pw\nalice:alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := stack.StartT(t, stack.Options{Listeners: []string{"SASL_PLAINTEXT"},
		GatewayFlags: []string{"--sasl-users-file", users, "--authorizer=acl", "--super-users=User:admin"}})
	as := func(user string) *kgo.Client {
		return newClient(t, s.ListenerAddrs["SASL_PLAINTEXT"], kgo.SASL(plain.Auth{User: user, Pass: user + "-pw"}.AsMechanism()), kgo.RequestRetries(2))
	}
	admin, alice := as("admin"), as("alice")
	adm := kadm.NewClient(admin)
	prefix := topicName("reacl")
	eu, us := prefix+"-eu", prefix+"-us"
	createTopic(t, adm, eu, 2, nil)
	createTopic(t, adm, us, 2, nil)
	ids := map[[16]byte]string{waitTopic(t, adm, eu, 2).ID: eu, waitTopic(t, adm, us, 2).ID: us}
	group := topicName("reacl-g")
	ctx := ctxT(t, 2*time.Minute)
	grant := func(acl *kadm.ACLBuilder) {
		t.Helper()
		res, err := adm.CreateACLs(ctx, acl)
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("CreateACLs: %v %+v", err, res)
		}
	}
	grant(kadm.NewACLs().Allow("User:alice").Groups(group).Operations(kadm.OpRead))
	grant(kadm.NewACLs().Allow("User:alice").Topics(eu).Operations(kadm.OpRead))

	// A member heartbeats as a KIP-848 consumer does: it joins with the regex, then
	// reports what it was assigned as owned.
	type member struct {
		cl     *kgo.Client
		group  string
		id     string
		epoch  int32
		assign map[string][]int32
	}
	heartbeat := func(m *member) {
		t.Helper()
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch, req.RebalanceTimeoutMillis = m.group, m.id, m.epoch, -1
		if m.epoch == 0 {
			req.RebalanceTimeoutMillis = 30000
			req.SubscribedTopicRegex = kmsg.StringPtr(prefix + "-.*")
		}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		for id, name := range ids {
			if ps := m.assign[name]; len(ps) > 0 {
				req.Topics = append(req.Topics, kmsg.ConsumerGroupHeartbeatRequestTopic{TopicID: id, Partitions: ps})
			}
		}
		resp, err := req.RequestWith(ctx, m.cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("%s: ConsumerGroupHeartbeat: %v %v", m.id, err, kerr.ErrorForCode(resp.ErrorCode))
		}
		m.epoch = resp.MemberEpoch
		if resp.Assignment != nil {
			m.assign = map[string][]int32{}
			for _, at := range resp.Assignment.Topics {
				name, ok := ids[at.TopicID]
				if !ok {
					t.Fatalf("%s: assigned topic id %x, neither %s nor %s", m.id, at.TopicID, eu, us)
				}
				m.assign[name] = at.Partitions
			}
		}
	}
	// settle heartbeats m until its assignment stops changing and holds want's topics.
	settle := func(m *member, want ...string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			heartbeat(m)
			var got []string
			for name, ps := range m.assign {
				if len(ps) == 2 {
					got = append(got, name)
				}
			}
			slices.Sort(got)
			if slices.Equal(got, want) && len(m.assign) == len(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: assigned %v, want all of %v", m.id, m.assign, want)
			}
			time.Sleep(100 * time.Millisecond) // heartbeat pace
		}
	}
	a := &member{cl: alice, group: group, id: "alice-member-0001"}
	settle(a, eu)
	for range 5 {
		if heartbeat(a); len(a.assign[us]) != 0 {
			t.Fatalf("alice assigned %s, which she may not describe: %v", us, a.assign)
		}
	}
	grant(kadm.NewACLs().Allow("User:alice").Topics(us).Operations(kadm.OpDescribe))
	settle(a, eu, us)

	settle(&member{cl: admin, group: group + "-admin", id: "admin-member-0001"}, eu, us)
}
