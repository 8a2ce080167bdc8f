package handler

import (
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// alterReq builds an AlterConfigs request with one resource per entry of rs.
func alterReq(validateOnly bool, rs ...kmsg.AlterConfigsRequestResource) *kmsg.AlterConfigsRequest {
	req := kmsg.NewPtrAlterConfigsRequest()
	req.ValidateOnly = validateOnly
	req.Resources = rs
	return req
}

// alterRes is one AlterConfigs resource; pairs are name, value; a value "<null>" is null.
func alterRes(typ kmsg.ConfigResourceType, name string, pairs ...string) kmsg.AlterConfigsRequestResource {
	res := kmsg.NewAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = typ, name
	for i := 0; i+1 < len(pairs); i += 2 {
		c := kmsg.NewAlterConfigsRequestResourceConfig()
		c.Name = pairs[i]
		if pairs[i+1] != "<null>" {
			c.Value = kmsg.StringPtr(pairs[i+1])
		}
		res.Configs = append(res.Configs, c)
	}
	return res
}

// topicOverrides returns the configs topic sets itself (DYNAMIC_TOPIC_CONFIG).
func (e *env) topicOverrides(t *testing.T, topic string) map[string]string {
	t.Helper()
	desc := kmsg.NewPtrDescribeConfigsRequest()
	dr := kmsg.NewDescribeConfigsRequestResource()
	dr.ResourceType, dr.ResourceName = resourceTopic, topic
	desc.Resources = append(desc.Resources, dr)
	out := map[string]string{}
	for _, c := range e.do(t, desc, 4).(*kmsg.DescribeConfigsResponse).Resources[0].Configs {
		if c.Source == sourceDynamicTopic {
			out[c.Name] = *c.Value
		}
	}
	return out
}

// TestAlterConfigsReplaces: at every version the configs given become the topic's whole
// set (one not named returns to its default), and validate_only changes nothing.
func TestAlterConfigsReplaces(t *testing.T) {
	e := newEnv(t, nil)
	for _, v := range []int16{0, 1, 2} {
		topic := "rep" + string(rune('0'+v))
		e.createTopic(t, topic, 1, map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"})
		before := map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}

		resp := e.do(t, alterReq(true, alterRes(resourceTopic, topic, "max.message.bytes", "2048")), v).(*kmsg.AlterConfigsResponse)
		if len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 || resp.Resources[0].ResourceName != topic || resp.Resources[0].ResourceType != resourceTopic {
			t.Fatalf("v%d validate_only: %+v", v, resp.Resources)
		}
		if got := e.topicOverrides(t, topic); !maps.Equal(got, before) {
			t.Errorf("v%d validate_only changed the configs: %v", v, got)
		}

		resp = e.do(t, alterReq(false, alterRes(resourceTopic, topic, "max.message.bytes", "2048", "retention.ms", "5000")), v).(*kmsg.AlterConfigsResponse)
		if resp.Resources[0].ErrorCode != 0 || resp.Resources[0].ErrorMessage != nil {
			t.Fatalf("v%d alter: %s %v", v, code(resp.Resources[0].ErrorCode), resp.Resources[0].ErrorMessage)
		}
		if got, want := e.topicOverrides(t, topic), map[string]string{"max.message.bytes": "2048", "retention.ms": "5000"}; !maps.Equal(got, want) {
			t.Errorf("v%d after alter: %v, want %v (cleanup.policy back to its default)", v, got, want)
		}

		if got := e.do(t, alterReq(false, alterRes(resourceTopic, topic)), v).(*kmsg.AlterConfigsResponse).Resources[0].ErrorCode; got != 0 {
			t.Fatalf("v%d empty alter: %s", v, code(got))
		}
		if got := e.topicOverrides(t, topic); len(got) != 0 {
			t.Errorf("v%d an empty set left overrides: %v", v, got)
		}
	}
}

// TestAlterConfigsResourceErrors: each refused resource gets Kafka's code and the others
// in the same request are still applied.
func TestAlterConfigsResourceErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "ok", 1, nil)
	e.createTopic(t, "kept", 1, map[string]string{"retention.ms": "1000"})
	req := alterReq(false,
		alterRes(resourceTopic, "ok", "retention.ms", "7"),
		alterRes(resourceTopic, "twice", "retention.ms", "1"),
		alterRes(resourceTopic, "twice", "retention.ms", "2"),
		alterRes(resourceTopic, "kept", "retention.ms", "1", "retention.ms", "2"),
		alterRes(resourceTopic, "kept", "retention.ms", "1", "cleanup.policy", "<null>"),
		alterRes(resourceBroker, "1", "log.retention.ms", "1"),
		alterRes(kmsg.ConfigResourceType(8), "1"), // BROKER_LOGGER: not in AlterConfigs
		alterRes(kmsg.ConfigResourceType(99), "x"),
		alterRes(resourceTopic, ""),
		alterRes(resourceTopic, "bad~name", "retention.ms", "1"),
		alterRes(resourceTopic, "missing", "retention.ms", "1"),
	)
	want := []int16{0, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code,
		kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code, kerr.InvalidRequest.Code,
		kerr.InvalidTopicException.Code, kerr.UnknownTopicOrPartition.Code}
	resp := e.do(t, req, 2).(*kmsg.AlterConfigsResponse)
	if len(resp.Resources) != len(want) {
		t.Fatalf("%d resources answered, want %d", len(resp.Resources), len(want))
	}
	for i, w := range want {
		r := resp.Resources[i]
		if r.ErrorCode != w || r.ResourceName != req.Resources[i].ResourceName || r.ResourceType != req.Resources[i].ResourceType {
			t.Errorf("resource %d (%d %q): %s, want %s", i, req.Resources[i].ResourceType, req.Resources[i].ResourceName, code(r.ErrorCode), code(w))
		}
		if w == kerr.InvalidRequest.Code && r.ErrorMessage == nil {
			t.Errorf("resource %d: INVALID_REQUEST without a message", i)
		}
	}
	if got := e.topicOverrides(t, "ok"); !maps.Equal(got, map[string]string{"retention.ms": "7"}) {
		t.Errorf("ok: %v", got)
	}
	if got := e.topicOverrides(t, "kept"); !maps.Equal(got, map[string]string{"retention.ms": "1000"}) {
		t.Errorf("refused alters changed kept: %v", got)
	}
}

func TestAlterConfigsCoordinatorDown(t *testing.T) {
	e := newEnv(t, nil)
	e.createTopic(t, "down", 1, nil)
	e.co.SetFailure(status.Error(codes.Unavailable, "down"))
	resp := e.do(t, alterReq(false, alterRes(resourceTopic, "down", "retention.ms", "1"), alterRes(resourceBroker, "1")), 1).(*kmsg.AlterConfigsResponse)
	if got := resp.Resources[0].ErrorCode; got != kerr.RequestTimedOut.Code {
		t.Errorf("coordinator down: %s, want REQUEST_TIMED_OUT", code(got))
	}
	if got := resp.Resources[1].ErrorCode; got != kerr.InvalidRequest.Code {
		t.Errorf("broker while the coordinator is down: %s", code(got))
	}
}
