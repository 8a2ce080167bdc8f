package config

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// Kafka header names the bridge writes for MQTT metadata, in the order they are added
// to a record (user properties follow, each as its own header).
const (
	HeaderTopic                  = "mqtt-topic"
	HeaderQoS                    = "mqtt-qos"
	HeaderRetain                 = "mqtt-retain"
	HeaderClientID               = "mqtt-clientid"
	HeaderUsername               = "mqtt-username"
	HeaderContentType            = "mqtt-content-type"
	HeaderCorrelationData        = "mqtt-correlation-data"
	HeaderPayloadFormatIndicator = "mqtt-payload-format-indicator"
	HeaderResponseTopic          = "mqtt-response-topic"
	HeaderMessageExpiryInterval  = "mqtt-message-expiry-interval"
	// UserProperties selects every MQTT 5 user property in a headers list.
	UserProperties = "mqtt-user-properties"
	// UserPropertyPrefix is put before a user property name that starts with "mqtt-",
	// so it cannot pass for the bridge's own metadata.
	UserPropertyPrefix = "mqtt-user-property-"
)

// HeaderNames lists the metadata headers in record order.
var HeaderNames = []string{
	HeaderTopic, HeaderQoS, HeaderRetain, HeaderClientID, HeaderUsername,
	HeaderContentType, HeaderCorrelationData, HeaderPayloadFormatIndicator,
	HeaderResponseTopic, HeaderMessageExpiryInterval,
}

// HeaderSpec is the `headers` value of an mqtt-to-kafka mapping: `none` (default),
// `all`, or a list whose items are metadata header names (or mqtt-user-properties) and
// fixed `name: value` entries.
type HeaderSpec struct {
	All   bool
	Names []string
	Fixed []FixedHeader
	line  int
	set   bool
}

// FixedHeader is a constant header added to every record.
type FixedHeader struct {
	Name, Value string
	Line        int
}

// UnmarshalYAML accepts a scalar (none, all) or a list.
func (h *HeaderSpec) UnmarshalYAML(n *yaml.Node) error {
	h.line, h.set = n.Line, true
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.Value {
		case "none", "":
			return nil
		case "all":
			h.All = true
			return nil
		}
		return lineError(n.Line, "headers must be none, all or a list, not %q", n.Value)
	case yaml.SequenceNode:
		for _, it := range n.Content {
			switch it.Kind {
			case yaml.ScalarNode:
				h.Names = append(h.Names, it.Value)
			case yaml.MappingNode:
				for i := 0; i+1 < len(it.Content); i += 2 {
					k, v := it.Content[i], it.Content[i+1]
					if v.Kind != yaml.ScalarNode {
						return lineError(v.Line, "fixed header %q needs a string value", k.Value)
					}
					h.Fixed = append(h.Fixed, FixedHeader{Name: k.Value, Value: v.Value, Line: k.Line})
				}
			default:
				return lineError(it.Line, "a headers item is a header name or a `name: value` entry")
			}
		}
		return nil
	}
	return lineError(n.Line, "headers must be none, all or a list")
}

// StringList is a string or a list of strings.
type StringList []string

// UnmarshalYAML accepts a scalar or a sequence of scalars.
func (s *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = StringList{n.Value}
		return nil
	case yaml.SequenceNode:
		var out []string
		if err := n.Decode(&out); err != nil {
			return err
		}
		*s = out
		return nil
	}
	return lineError(n.Line, "expected a string or a list of strings")
}

// lineError is a decoding problem at line. As a *yaml.TypeError, it lets the decoder
// go on with the rest of the file (any other error stops it there, and the keys after
// it would be reported missing, their own problems not at all).
func lineError(line int, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", line) + fmt.Sprintf(format, args...)}}
}
