package grpcx

import (
	"fmt"
	"strings"

	"github.com/tributary/tributary/libs/channel"
)

// Verb is what a call does to a resource (a channel, or the cluster as a whole).
type Verb uint8

// The verbs every RPC of storage-core and the coordinator maps to.
const (
	// VerbRead reads records, positions, configs or registry entries.
	VerbRead Verb = 1 << iota
	// VerbAppend writes records.
	VerbAppend
	// VerbAdmin creates, deletes or reconfigures channels, queues and registry entries.
	VerbAdmin

	verbAll = VerbRead | VerbAppend | VerbAdmin
)

func (v Verb) String() string {
	switch v {
	case VerbRead:
		return "read"
	case VerbAppend:
		return "append"
	case VerbAdmin:
		return "admin"
	}
	return fmt.Sprintf("verbs(%d)", uint8(v))
}

// ClusterResource is the resource of a call that names no channel (every coordinator
// call, ListChannels without a prefix, SweepLeases): only a right on "*" covers it.
const ClusterResource = ""

// Right grants verbs on every resource whose name starts with Prefix; Prefix "*" is
// every resource, the cluster included.
type Right struct {
	Verbs  Verb
	Prefix string
}

// ParseRight parses "VERB:PREFIX", VERB one of read, append, admin or * (all three), and
// PREFIX a channel-name prefix or * (everything): "read:kafka.orders" covers kafka.orders
// and its partitions kafka.orders~1...; "*:*" is everything.
func ParseRight(s string) (Right, error) {
	verb, prefix, ok := strings.Cut(s, ":")
	if !ok || prefix == "" {
		return Right{}, fmt.Errorf("%w %q: want VERB:PREFIX (read, append, admin or *; a channel prefix or *)", ErrRights, s)
	}
	var v Verb
	switch verb {
	case "read":
		v = VerbRead
	case "append":
		v = VerbAppend
	case "admin":
		v = VerbAdmin
	case "*":
		v = verbAll
	default:
		return Right{}, fmt.Errorf("%w %q: verb %q is not read, append, admin or *", ErrRights, s, verb)
	}
	return Right{Verbs: v, Prefix: prefix}, nil
}

// ParseRights parses each of ss with ParseRight.
func ParseRights(ss []string) ([]Right, error) {
	out := make([]Right, 0, len(ss))
	for _, s := range ss {
		r, err := ParseRight(s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// AllRights is what a service principal holds.
var AllRights = []Right{{Verbs: verbAll, Prefix: "*"}}

// Principal is an authenticated caller.
type Principal struct {
	// Name is the certificate's common name, the static token's principal or the JWT's
	// subject.
	Name string
	// Via is how it authenticated: "cert", "token" or "jwt".
	Via string
	// Rights are what it may do.
	Rights []Right
}

// Allows reports whether p may do v on resource (a channel name or ClusterResource).
// A resource in the reserved "_" namespace is never allowed, whatever the rights.
func (p *Principal) Allows(v Verb, resource string) bool {
	if channel.IsReserved(resource) {
		return false
	}
	for _, r := range p.Rights {
		if r.Verbs&v == 0 {
			continue
		}
		if r.Prefix == "*" || (resource != ClusterResource && strings.HasPrefix(resource, r.Prefix)) {
			return true
		}
	}
	return false
}
