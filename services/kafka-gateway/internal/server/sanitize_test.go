package server

import (
	"testing"

	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
	"google.golang.org/protobuf/proto"
)

// Strings a Kafka client may send that protobuf cannot carry reach the coordinator
// decoded as Kafka decodes them, so the request marshals instead of failing (which the
// client saw as a COORDINATOR_NOT_AVAILABLE it retried forever).
func TestSanitizeStringsLikeKafka(t *testing.T) {
	bad := "bad\xff\xfe"
	meta := "m\x00eta"
	req := &coordinatorv1.OffsetCommitRequest{
		GroupId: bad, MemberId: "ok", GroupInstanceId: proto.String("i\x00d"),
		Topics: []*coordinatorv1.OffsetCommitTopic{{Name: "t" + bad, Partitions: []*coordinatorv1.OffsetCommitPartition{{Metadata: &meta}}}},
	}
	if _, err := proto.Marshal(req); err == nil {
		t.Fatal("the unsanitized request marshals; the test no longer covers anything")
	}
	sanitizeMessage(req.ProtoReflect())
	if _, err := proto.Marshal(req); err != nil {
		t.Fatalf("sanitized request does not marshal: %v", err)
	}
	if req.GetGroupId() != "bad\uFFFD" || req.GetMemberId() != "ok" || req.GetGroupInstanceId() != "i\uFFFDd" ||
		req.GetTopics()[0].GetName() != "tbad\uFFFD" || req.GetTopics()[0].GetPartitions()[0].GetMetadata() != "m\uFFFDeta" {
		t.Fatalf("sanitized = %v", req)
	}
	join := &coordinatorv1.JoinGroupRequest{GroupId: "g", Protocols: []*coordinatorv1.GroupProtocol{{Name: "r\xc3", Metadata: []byte{0xff}}}}
	sanitizeMessage(join.ProtoReflect())
	if join.GetProtocols()[0].GetName() != "r\uFFFD" || join.GetProtocols()[0].GetMetadata()[0] != 0xff {
		t.Fatalf("join = %v (bytes must stay as they are)", join)
	}
}
