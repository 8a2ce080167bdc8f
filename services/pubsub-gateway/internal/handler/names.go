package handler

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/libs/channel"
)

// deletedTopic is what a subscription's topic reads once its topic was deleted.
const deletedTopic = "_deleted-topic_"

// Resource collections in names (projects/P/<collection>/ID).
const (
	collTopics        = "topics"
	collSubscriptions = "subscriptions"
	collSnapshots     = "snapshots"
	collSchemas       = "schemas"
)

// resource is a parsed projects/P/<collection>/ID name. The project is validated and
// kept only to build names back; ids are global (DESIGN section 2).
type resource struct {
	project, id string
}

func (r resource) name(collection string) string {
	return "projects/" + r.project + "/" + collection + "/" + r.id
}

// parseName parses projects/P/<collection>/ID. Errors are INVALID_ARGUMENT with
// Google's wording.
func parseName(name, collection string) (resource, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "projects" || parts[2] != collection || !validProject(parts[1]) {
		return resource{}, status.Errorf(codes.InvalidArgument, "Invalid [%s] name: (name=%s)", collection, name)
	}
	r := resource{project: parts[1], id: parts[3]}
	var err error
	if collection == collTopics {
		err = channel.ValidatePubSubTopicID(r.id)
	} else {
		err = channel.ValidatePubSubID(r.id)
	}
	if err != nil {
		return resource{}, status.Errorf(codes.InvalidArgument, "Invalid [%s] name: (name=%s)", collection, name)
	}
	return r, nil
}

// parseProject parses projects/P.
func parseProject(name string) (string, error) {
	p, ok := strings.CutPrefix(name, "projects/")
	if !ok || !validProject(p) {
		return "", status.Errorf(codes.InvalidArgument, "Invalid [projects] name: (name=%s)", name)
	}
	return p, nil
}

// validProject accepts project ids and numbers: 1..100 bytes of [a-z0-9.:-_] and
// letters (emulator users pick anything reasonable).
func validProject(p string) bool {
	if p == "" || len(p) > 100 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}
