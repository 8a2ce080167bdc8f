package handler

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Without a coordinator connection the KIP-848 APIs answer COORDINATOR_NOT_AVAILABLE
// (retriable), never a dropped connection.
func TestConsumerGroupAPIsWithoutCoordinator(t *testing.T) {
	e, _ := newGroupEnv(t)
	for v := int16(0); v <= 1; v++ {
		hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis, hb.SubscribedTopicNames = "g", "m", 5000, []string{"t"}
		if got := e.do(t, hb, v).(*kmsg.ConsumerGroupHeartbeatResponse); got.ErrorCode != kerr.CoordinatorNotAvailable.Code {
			t.Errorf("ConsumerGroupHeartbeat v%d: %v", v, kerr.ErrorForCode(got.ErrorCode))
		}
		d := kmsg.NewPtrConsumerGroupDescribeRequest()
		d.Groups = []string{"g", "h"}
		got := e.do(t, d, v).(*kmsg.ConsumerGroupDescribeResponse)
		if len(got.Groups) != 2 || got.Groups[0].ErrorCode != kerr.CoordinatorNotAvailable.Code || got.Groups[1].Group != "h" {
			t.Errorf("ConsumerGroupDescribe v%d: %+v", v, got.Groups)
		}
	}
}
