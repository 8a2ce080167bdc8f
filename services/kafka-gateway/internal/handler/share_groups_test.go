package handler

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestShareGroupsDisabled: with group.share.enable off the share group APIs are left
// out of ApiVersions (and so is share.version) and a request to one is refused like an
// API the gateway does not serve; on, they are listed and answered.
func TestShareGroupsDisabled(t *testing.T) {
	off := newEnv(t, func(c *Config) { c.DisableShareGroups = true })
	resp := off.do(t, apiVersionsV3(), 3).(*kmsg.ApiVersionsResponse)
	for _, k := range resp.ApiKeys {
		for _, s := range shareGroupKeys {
			if k.ApiKey == s {
				t.Errorf("share group key %d advertised with share groups off", k.ApiKey)
			}
		}
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "share.version" {
			t.Errorf("share.version finalized with share groups off: %+v", f)
		}
	}
	if u := off.h.UnsupportedAPIVersions(); len(u.ApiKeys) != len(resp.ApiKeys) {
		t.Errorf("unsupported-version answer lists %d keys, ApiVersions %d", len(u.ApiKeys), len(resp.ApiKeys))
	}
	req := kmsg.NewPtrShareGroupHeartbeatRequest()
	req.SetVersion(1)
	req.GroupID, req.MemberID, req.SubscribedTopicNames = "g", "m", []string{"t"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := off.h.Handle(ctx, &Request{Body: req}); !errors.Is(err, ErrUnsupportedAPI) {
		t.Errorf("ShareGroupHeartbeat with share groups off: %v, want ErrUnsupportedAPI", err)
	}

	on := newEnv(t, nil)
	resp = on.do(t, apiVersionsV3(), 3).(*kmsg.ApiVersionsResponse)
	listed := map[int16]bool{}
	for _, k := range resp.ApiKeys {
		listed[k.ApiKey] = true
	}
	if !listed[kmsg.ShareGroupHeartbeat.Int16()] || !listed[kmsg.ShareGroupDescribe.Int16()] {
		t.Errorf("share group keys not advertised with share groups on: %v", listed)
	}
	// No coordinator connection in this env: the retriable answer, not a crash.
	hb := on.do(t, req, 1).(*kmsg.ShareGroupHeartbeatResponse)
	if hb.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("heartbeat without a coordinator: code %d", hb.ErrorCode)
	}
	long := *req
	long.GroupID = strings.Repeat("g", 255)
	if hb := on.do(t, &long, 1).(*kmsg.ShareGroupHeartbeatResponse); hb.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("heartbeat with a %d-byte group id: code %d, want it passed on as any id (Kafka sets no bound; storage names its state by hash)", len(long.GroupID), hb.ErrorCode)
	}
	d := kmsg.NewPtrShareGroupDescribeRequest()
	d.GroupIDs = []string{"g"}
	if g := on.do(t, d, 1).(*kmsg.ShareGroupDescribeResponse).Groups; len(g) != 1 || g[0].ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("describe without a coordinator: %+v", g)
	}
	dso := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	dso.Groups = []kmsg.DescribeShareGroupOffsetsRequestGroup{{GroupID: "g"}}
	if g := on.do(t, dso, 1).(*kmsg.DescribeShareGroupOffsetsResponse).Groups; len(g) != 1 || g[0].ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("describe offsets without a coordinator: %+v", g)
	}
	aso := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	aso.GroupID = "g"
	if r := on.do(t, aso, 0).(*kmsg.AlterShareGroupOffsetsResponse); r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("alter offsets without a coordinator: %+v", r)
	}
	del := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
	del.GroupID = "g"
	if r := on.do(t, del, 0).(*kmsg.DeleteShareGroupOffsetsResponse); r.ErrorCode != kerr.CoordinatorNotAvailable.Code {
		t.Errorf("delete offsets without a coordinator: %+v", r)
	}
}
