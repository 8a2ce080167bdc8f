package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
	"github.com/tributary/tributary/tests/e2e/testenv"
)

const anonymous = "User:ANONYMOUS"

// allTopicsOn asks one gateway (not kgo's cached view) for every topic it shows.
func allTopicsOn(t *testing.T, cl *kgo.Client, node int) ([]string, error) {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl.Broker(node))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, mt := range resp.Topics {
		if mt.Topic != nil {
			names = append(names, *mt.Topic)
		}
	}
	return names, nil
}

// waitShown polls gateway node until its all-topics Metadata holds exactly want (of
// the topics in among), and fails the test after 30 s.
func waitShown(t *testing.T, cl *kgo.Client, node int, among map[string]bool, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		names, err := allTopicsOn(t, cl, node)
		var shown []string
		for _, n := range names {
			if among[n] {
				shown = append(shown, n)
			}
		}
		if err == nil && len(shown) == len(want) && (len(want) == 0 || multisetDiff(shown, want) == "") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %d lists %v of %v (err %v), want %v", node, shown, among, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describeAclsErr describes every ACL with kadm and returns the first error.
func describeAclsErr(t *testing.T, adm *kadm.Client) error {
	t.Helper()
	res, err := adm.DescribeACLs(ctxT(t, 30*time.Second), kadm.NewACLs().AnyResource().Allow().AllowHosts().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// firstFetchErr polls cl until a fetch carries an error (a partition's, or one kgo
// injects for its group or metadata) and returns it; nil after 30 s without one.
func firstFetchErr(t *testing.T, cl *kgo.Client) error {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var first error
		fetches.EachError(func(_ string, _ int32, err error) {
			if first == nil {
				first = err
			}
		})
		if first != nil {
			return first
		}
	}
}

// TestAcls runs two gateways with the authorizer on and an ACL cache bound of an hour,
// so a change made through one replica reaches the other only by the coordinator's
// NATS notice. The principal is User:ANONYMOUS (PLAINTEXT): bootstrapped with ALL on
// the cluster and on every topic through the coordinator's AclService (as one would
// with super.users), it creates topics a and b, then with kadm grants itself READ on a
// and deletes its own bootstrap ACLs; from then on it has READ on a only: producing to
// a, any access to b and joining a group are each the Kafka authorization error,
// Metadata lists only a, and it may no longer manage ACLs.
func TestAcls(t *testing.T) {
	s := stack.StartT(t, stack.Options{Gateways: 2, GatewayFlags: []string{"--authorizer=acl", "--acl-cache-max-age=1h"}})
	acls := coordinatorv1.NewAclServiceClient(dialGRPC(t, s.CoordinatorAddr))
	cl := newClient(t, s.KafkaAddrs, kgo.DisableIdempotentWrite(), kgo.RecordRetries(2), kgo.RequestRetries(2))
	adm := kadm.NewClient(cl)
	a, b := topicName("acl-a"), topicName("acl-b")
	among := map[string]bool{a: true, b: true}

	// Authorizer on, no ACL: nothing is allowed, not even creating a topic.
	if _, err := adm.CreateTopic(ctxT(t, 30*time.Second), 1, -1, nil, a); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("CreateTopics without ACLs: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := describeAclsErr(t, adm); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("DescribeAcls without ACLs: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}

	boot := []*coordinatorv1.AclBinding{
		{ResourceType: int32(kafkaacl.ResourceCluster), ResourceName: kafkaacl.ClusterName, PatternType: int32(kafkaacl.PatternLiteral),
			Principal: anonymous, Host: "*", Operation: int32(kafkaacl.OpAll), PermissionType: int32(kafkaacl.PermissionAllow)},
		{ResourceType: int32(kafkaacl.ResourceTopic), ResourceName: "*", PatternType: int32(kafkaacl.PatternLiteral),
			Principal: anonymous, Host: "*", Operation: int32(kafkaacl.OpAll), PermissionType: int32(kafkaacl.PermissionAllow)},
	}
	if r, err := acls.CreateAcls(ctxT(t, 30*time.Second), &coordinatorv1.CreateAclsRequest{Creations: boot}); err != nil ||
		r.GetResults()[0].GetErrorCode() != 0 || r.GetResults()[1].GetErrorCode() != 0 {
		t.Fatalf("bootstrap ACLs: %v %v", r, err)
	}
	// Both replicas hear of it (their cache would otherwise hold the empty set for an
	// hour): DescribeCluster's authorized operations, 0 without DESCRIBE, are all of them.
	deadline := time.Now().Add(30 * time.Second)
	for node := range s.KafkaAddrs {
		for {
			req := kmsg.NewPtrDescribeClusterRequest()
			req.IncludeClusterAuthorizedOperations = true
			resp, err := req.RequestWith(ctxT(t, 10*time.Second), cl.Broker(node))
			if err == nil && resp.ErrorCode == 0 && resp.ClusterAuthorizedOperations != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %d never applied the bootstrap ACLs: %v %+v", node, err, resp)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	createTopic(t, adm, a, 1, nil)
	createTopic(t, adm, b, 1, nil)
	for _, topic := range []string{a, b} {
		if err := cl.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Topic: topic, Value: []byte("before")}).FirstErr(); err != nil {
			t.Fatalf("produce to %s with ALL: %v", topic, err)
		}
	}
	waitShown(t, cl, 0, among, a, b)

	// kadm: READ on a for the principal, then remove the bootstrap ACLs.
	created, err := adm.CreateACLs(ctxT(t, 30*time.Second), kadm.NewACLs().Allow(anonymous).Topics(a).Operations(kadm.OpRead))
	if err != nil || len(created) != 1 || created[0].Err != nil {
		t.Fatalf("kadm CreateACLs: %v %+v", err, created)
	}
	described, err := adm.DescribeACLs(ctxT(t, 30*time.Second), kadm.NewACLs().Allow(anonymous).AllowHosts().AnyResource().Operations(kadm.OpAny).ResourcePatternType(kadm.ACLPatternAny))
	if err != nil {
		t.Fatalf("kadm DescribeACLs: %v", err)
	}
	n := 0
	for _, d := range described {
		if d.Err != nil {
			t.Fatalf("kadm DescribeACLs: %v", d.Err)
		}
		n += len(d.Described)
	}
	if n != 3 {
		t.Fatalf("kadm DescribeACLs: %d ACLs, want 3: %+v", n, described)
	}
	deleted, err := adm.DeleteACLs(ctxT(t, 30*time.Second), kadm.NewACLs().Allow(anonymous).AllowHosts().Clusters().Topics("*").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral))
	if err != nil {
		t.Fatalf("kadm DeleteACLs: %v", err)
	}
	gone := 0
	for _, d := range deleted {
		if d.Err != nil {
			t.Fatalf("kadm DeleteACLs: %v", d.Err)
		}
		gone += len(d.Deleted)
	}
	if gone != 2 {
		t.Fatalf("kadm DeleteACLs removed %d ACLs, want the 2 bootstrap ones: %+v", gone, deleted)
	}

	// Each replica lists only a, the one that did not serve DeleteAcls through the
	// notice alone (a figure, not an assertion: the time is logged).
	deletedAt := time.Now()
	for node := range s.KafkaAddrs {
		waitShown(t, cl, node, among, a)
		t.Logf("gateway %d applied the deletion %v after DeleteAcls answered", node, time.Since(deletedAt))
	}

	ctx := ctxT(t, 60*time.Second)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: a, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("produce to a with READ only: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: b, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("produce to b: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	// An idempotent producer may not even get a producer id: no WRITE anywhere and no
	// IDEMPOTENT_WRITE on the cluster.
	idem := newClient(t, s.KafkaAddrs, kgo.RecordRetries(2))
	if err := idem.ProduceSync(ctx, &kgo.Record{Topic: a, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("idempotent produce with READ only: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}

	// Metadata, ListOffsets and Fetch on b: each TOPIC_AUTHORIZATION_FAILED; on a, READ
	// serves them.
	for node := range s.KafkaAddrs {
		req := kmsg.NewPtrMetadataRequest()
		for _, n := range []string{a, b} {
			mt := kmsg.NewMetadataRequestTopic()
			mt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, mt)
		}
		req.IncludeTopicAuthorizedOperations = true
		resp, err := req.RequestWith(ctx, cl.Broker(node))
		if err != nil {
			t.Fatalf("metadata on gateway %d: %v", node, err)
		}
		if resp.Topics[0].ErrorCode != 0 || resp.Topics[1].ErrorCode != kerr.TopicAuthorizationFailed.Code {
			t.Errorf("metadata a, b on gateway %d: %v, %v", node, kerr.ErrorForCode(resp.Topics[0].ErrorCode), kerr.ErrorForCode(resp.Topics[1].ErrorCode))
		}
		ops := kadm.DecodeACLOperations(resp.Topics[0].AuthorizedOperations)
		if len(ops) != 2 {
			t.Errorf("authorized operations of a on gateway %d: %v, want READ and DESCRIBE", node, ops)
		}
	}
	offs, err := adm.ListEndOffsets(ctx, a)
	if o, _ := offs.Lookup(a, 0); err != nil || o.Err != nil || o.Offset != 1 {
		t.Errorf("end offset of a: %+v %v", o, err)
	}
	offs, err = adm.ListEndOffsets(ctx, b)
	if o, _ := offs.Lookup(b, 0); !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(o.Err, kerr.TopicAuthorizationFailed) {
		t.Errorf("end offset of b: %v %v, want TOPIC_AUTHORIZATION_FAILED", err, o.Err)
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = b
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	if resp, err := lo.RequestWith(ctx, cl.Broker(1)); err != nil || resp.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Errorf("ListOffsets b: %v %+v", err, resp)
	}
	if recs := consumeAll(t, s.KafkaAddrs, a); len(recs) != 1 || string(recs[0].Value) != "before" {
		t.Errorf("consume a with READ: %d records", len(recs))
	}
	bc := newClient(t, s.KafkaAddrs, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b: {0: kgo.NewOffset().At(0)}}))
	if err := firstFetchErr(t, bc); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("consume b: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// Joining a group without READ on it: GROUP_AUTHORIZATION_FAILED, first from
	// FindCoordinator (kgo's group consumer), then from JoinGroup itself.
	group := topicName("acl-group")
	gc := newClient(t, s.KafkaAddrs, kgo.ConsumerGroup(group), kgo.ConsumeTopics(a), kgo.FetchMaxWait(100*time.Millisecond))
	groupErr := firstFetchErr(t, gc)
	if !errors.Is(groupErr, kerr.GroupAuthorizationFailed) {
		t.Errorf("group consumer without READ on the group: %v, want GROUP_AUTHORIZATION_FAILED", groupErr)
	}
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Group, jg.ProtocolType, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = group, "consumer", 10000, 10000
	jg.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range"}}
	if resp, err := jg.RequestWith(ctx, cl.Broker(1)); err != nil || resp.ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Errorf("JoinGroup without READ on the group: %v %+v", err, resp)
	}

	// The bootstrap ACLs are gone, so the principal may not manage ACLs any more.
	if res, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow(anonymous).Topics(b).Operations(kadm.OpRead)); err != nil ||
		len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("CreateAcls without ALTER on the cluster: %v %+v", err, res)
	}
	if err := describeAclsErr(t, adm); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("DescribeAcls without DESCRIBE on the cluster: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
}

// TestAclsSASL is the case with a real SASL principal: two gateways with a
// SASL_PLAINTEXT listener (users admin and alice, PLAIN), the authorizer on, admin a
// super user, and an ACL cache bound of an hour. admin creates topics a and b and, with
// kadm on gateway 0, grants User:alice READ on a; on gateway 1 (the notice alone carries
// the change there) alice then sees only a in Metadata, reads a, and gets the Kafka
// authorization error for producing to a, any access to b, joining a group and managing
// ACLs; User:ANONYMOUS on PLAINTEXT sees nothing. admin's DeleteAcls takes a away from
// alice on gateway 1 too.
func TestAclsSASL(t *testing.T) {
	testenv.Require(t)
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("admin:admin-pw\nalice:alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := stack.StartT(t, stack.Options{Gateways: 2, Listeners: []string{"SASL_PLAINTEXT"},
		GatewayFlags: []string{"--sasl-users-file", users, "--authorizer=acl", "--super-users=User:admin", "--acl-cache-max-age=1h"}})
	sasl := s.ListenerAddrs["SASL_PLAINTEXT"]
	as := func(node int, user string, opts ...kgo.Opt) *kgo.Client {
		return newClient(t, []string{sasl[node]}, append([]kgo.Opt{kgo.SASL(plain.Auth{User: user, Pass: user + "-pw"}.AsMechanism()),
			kgo.DisableIdempotentWrite(), kgo.RecordRetries(2), kgo.RequestRetries(2)}, opts...)...)
	}
	admin := as(0, "admin")
	adm := kadm.NewClient(admin)
	a, b := topicName("sasl-acl-a"), topicName("sasl-acl-b")
	among := map[string]bool{a: true, b: true}
	createTopic(t, adm, a, 1, nil)
	createTopic(t, adm, b, 1, nil)
	for _, topic := range []string{a, b} {
		if err := admin.ProduceSync(ctxT(t, 30*time.Second), &kgo.Record{Topic: topic, Value: []byte("by admin")}).FirstErr(); err != nil {
			t.Fatalf("admin produce to %s: %v", topic, err)
		}
	}

	alice := as(1, "alice")
	if _, err := allTopicsOn(t, alice, 1); err != nil {
		t.Fatalf("alice metadata: %v", err)
	}
	waitShown(t, alice, 1, among)

	created, err := adm.CreateACLs(ctxT(t, 30*time.Second), kadm.NewACLs().Allow("User:alice").Topics(a).Operations(kadm.OpRead))
	if err != nil || len(created) != 1 || created[0].Err != nil {
		t.Fatalf("kadm CreateACLs on gateway 0: %v %+v", err, created)
	}
	grantedAt := time.Now()
	waitShown(t, alice, 1, among, a)
	t.Logf("gateway 1 applied the grant %v after CreateAcls answered on gateway 0", time.Since(grantedAt))

	ctx := ctxT(t, 60*time.Second)
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: a, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("alice produce to a: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := alice.ProduceSync(ctx, &kgo.Record{Topic: b, Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("alice produce to b: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := firstFetchErr(t, as(1, "alice", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b: {0: kgo.NewOffset().At(0)}}))); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("alice consume b: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	reader := as(1, "alice", kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{a: {0: kgo.NewOffset().At(0)}}))
	fetches := reader.PollFetches(ctx)
	if err := fetches.Err(); err != nil || fetches.NumRecords() != 1 || string(fetches.Records()[0].Value) != "by admin" {
		t.Errorf("alice consume a: %v, %d records", err, fetches.NumRecords())
	}
	group := as(1, "alice", kgo.ConsumerGroup(topicName("sasl-acl-group")), kgo.ConsumeTopics(a))
	if err := firstFetchErr(t, group); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Errorf("alice joining a group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	if res, err := kadm.NewClient(alice).CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").Topics(b).Operations(kadm.OpRead)); err != nil ||
		len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("alice CreateAcls: %v %+v, want CLUSTER_AUTHORIZATION_FAILED", err, res)
	}
	anon := newClient(t, s.KafkaAddrs)
	if _, err := allTopicsOn(t, anon, 1); err != nil {
		t.Fatalf("anonymous metadata: %v", err)
	}
	waitShown(t, anon, 1, among)

	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Topics(a).Operations(kadm.OpRead))
	if err != nil || len(deleted) != 1 || deleted[0].Err != nil || len(deleted[0].Deleted) != 1 {
		t.Fatalf("kadm DeleteACLs on gateway 0: %v %+v", err, deleted)
	}
	deletedAt := time.Now()
	waitShown(t, alice, 1, among)
	t.Logf("gateway 1 applied the deletion %v after DeleteAcls answered on gateway 0", time.Since(deletedAt))
}
