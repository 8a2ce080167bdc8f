// Package template compiles the bridge's string templates: Kafka record keys built from
// an MQTT message (${MQTT_TOPIC}, ${MQTT_CLIENTID}, ${MQTT_TOPIC_LEVEL_n}) and MQTT
// topics built from a Kafka record (${KAFKA_TOPIC}, ${KAFKA_KEY}). Text outside ${...}
// is copied as is; "$$" is a literal "$".
package template

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrTemplate is returned for a template that does not compile.
var ErrTemplate = errors.New("bad template")

// Vars names the variables a kind of template may use.
type Vars int

// Kinds of template.
const (
	// MQTT templates see an MQTT message (mqtt-to-kafka keys).
	MQTT Vars = iota
	// Kafka templates see a Kafka record (kafka-to-mqtt topics).
	Kafka
)

type partKind int

const (
	lit partKind = iota
	mqttTopic
	mqttClientID
	mqttLevel
	kafkaTopic
	kafkaKey
)

type part struct {
	kind  partKind
	text  string
	level int
}

// Template is a compiled template.
type Template struct {
	src   string
	parts []part
}

// String is the template's source.
func (t *Template) String() string { return t.src }

// Compile parses src for the variables of kind vars.
func Compile(src string, vars Vars) (*Template, error) {
	t := &Template{src: src}
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			t.parts = append(t.parts, part{kind: lit, text: b.String()})
			b.Reset()
		}
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c != '$' {
			b.WriteByte(c)
			continue
		}
		if i+1 < len(src) && src[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		if i+1 >= len(src) || src[i+1] != '{' {
			return nil, fmt.Errorf("%w %q: a lone $ at byte %d (write $$ for a literal $)", ErrTemplate, src, i)
		}
		end := strings.IndexByte(src[i:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%w %q: ${ at byte %d is not closed", ErrTemplate, src, i)
		}
		name := src[i+2 : i+end]
		p, err := variable(name, vars)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrTemplate, src, err)
		}
		flush()
		t.parts = append(t.parts, p)
		i += end
	}
	flush()
	return t, nil
}

func variable(name string, vars Vars) (part, error) {
	switch vars {
	case MQTT:
		switch name {
		case "MQTT_TOPIC":
			return part{kind: mqttTopic}, nil
		case "MQTT_CLIENTID":
			return part{kind: mqttClientID}, nil
		}
		if rest, ok := strings.CutPrefix(name, "MQTT_TOPIC_LEVEL_"); ok {
			n, err := strconv.Atoi(rest)
			if err != nil || n < 0 || n > 1000 || strconv.Itoa(n) != rest {
				return part{}, fmt.Errorf("${%s}: the level must be a number from 0", name)
			}
			return part{kind: mqttLevel, level: n}, nil
		}
		return part{}, fmt.Errorf("unknown variable ${%s} (known: ${MQTT_TOPIC}, ${MQTT_CLIENTID}, ${MQTT_TOPIC_LEVEL_n})", name)
	default:
		switch name {
		case "KAFKA_TOPIC":
			return part{kind: kafkaTopic}, nil
		case "KAFKA_KEY":
			return part{kind: kafkaKey}, nil
		}
		return part{}, fmt.Errorf("unknown variable ${%s} (known: ${KAFKA_TOPIC}, ${KAFKA_KEY})", name)
	}
}

// UsesClientID reports whether the template reads ${MQTT_CLIENTID}.
func (t *Template) UsesClientID() bool {
	for _, p := range t.parts {
		if p.kind == mqttClientID {
			return true
		}
	}
	return false
}

// ExpandMQTT renders an MQTT template. A topic level past the last one is empty.
func (t *Template) ExpandMQTT(topic, clientID string) string {
	if len(t.parts) == 1 && t.parts[0].kind == mqttTopic {
		return topic
	}
	var b strings.Builder
	var levels []string
	for _, p := range t.parts {
		switch p.kind {
		case lit:
			b.WriteString(p.text)
		case mqttTopic:
			b.WriteString(topic)
		case mqttClientID:
			b.WriteString(clientID)
		case mqttLevel:
			if levels == nil {
				levels = strings.Split(topic, "/")
			}
			if p.level < len(levels) {
				b.WriteString(levels[p.level])
			}
		}
	}
	return b.String()
}

// ExpandKafka renders a Kafka template; a null key renders as empty.
func (t *Template) ExpandKafka(topic string, key []byte) string {
	if len(t.parts) == 1 && t.parts[0].kind == kafkaTopic {
		return topic
	}
	var b strings.Builder
	for _, p := range t.parts {
		switch p.kind {
		case lit:
			b.WriteString(p.text)
		case kafkaTopic:
			b.WriteString(topic)
		case kafkaKey:
			b.Write(key)
		}
	}
	return b.String()
}
