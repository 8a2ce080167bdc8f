package consumergroup

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tributary/tributary/libs/kafkaacl"
	coordinatorv1 "github.com/tributary/tributary/proto/gen/tributary/coordinator/v1"
)

// topicInfo is a registered topic as the heartbeat sees it.
type topicInfo struct {
	Name       string
	ID         string // hex
	Partitions int32
}

// outcome is a heartbeat's answer before it becomes a response.
type outcome struct {
	code    int16
	msg     string
	member  *member // nil on error
	epoch   int32
	sendAll bool // the assignment goes in the response
}

func fail(e *kerr.Error, format string, args ...any) outcome {
	return outcome{code: e.Code, msg: fmt.Sprintf(format, args...)}
}

// validate checks a heartbeat as Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid
// does (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION).
func (c *Coordinator) validate(req *coordinatorv1.ConsumerGroupHeartbeatRequest) *outcome {
	bad := func(format string, args ...any) *outcome {
		o := fail(kerr.InvalidRequest, format, args...)
		return &o
	}
	if req.GetGroupId() == "" {
		o := fail(kerr.InvalidGroupID, "GroupId can't be empty.")
		return &o
	}
	if req.GetInstanceId() == "" && req.InstanceId != nil {
		return bad("InstanceId can't be empty.")
	}
	if req.GetRackId() == "" && req.RackId != nil {
		return bad("RackId can't be empty.")
	}
	e := req.GetMemberEpoch()
	if req.GetVersion() >= 1 || e != epochJoin {
		if req.GetMemberId() == "" {
			return bad("MemberId can't be empty.")
		}
	}
	switch {
	case e == epochJoin:
		if req.GetRebalanceTimeoutMs() == -1 {
			return bad("RebalanceTimeoutMs must be provided in first request.")
		}
		if !req.GetHasTopicPartitions() || len(req.GetTopicPartitions()) > 0 {
			return bad("TopicPartitions must be empty when (re-)joining.")
		}
		if len(req.GetSubscribedTopicNames()) == 0 && req.GetSubscribedTopicRegex() == "" {
			return bad("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
		}
	case e == epochStaticLeave:
		if req.InstanceId == nil {
			return bad("InstanceId can't be null.")
		}
	case e < epochStaticLeave:
		return bad("MemberEpoch is invalid.")
	}
	if req.GetHasSubscribedTopicNames() && req.SubscribedTopicRegex != nil && len(req.GetSubscribedTopicNames()) > 0 && req.GetSubscribedTopicRegex() != "" {
		return bad("SubscribedTopicNames and SubscribedTopicRegex can't both be set.")
	}
	if re := req.GetSubscribedTopicRegex(); re != "" {
		if _, err := c.regex(re); err != nil {
			o := fail(kerr.InvalidRegularExpression, "SubscribedTopicRegex `%s` is not a valid regular expression: %v.", re, err)
			return &o
		}
	}
	if a := req.ServerAssignor; a != nil && !slices.Contains(c.cfg.Assignors, *a) {
		o := fail(kerr.UnsupportedAssignor, "ServerAssignor %s is not supported. Supported assignors: %v.", *a, c.cfg.Assignors)
		return &o
	}
	return nil
}

// regex compiles a subscription regex (RE2) anchored to whole topic names, cached.
func (c *Coordinator) regex(re string) (*regexp.Regexp, error) {
	if v, ok := c.regexes.Load(re); ok {
		return v.(*regexp.Regexp), nil
	}
	r, err := regexp.Compile(`^(?:` + re + `)$`)
	if err != nil {
		return nil, err
	}
	c.regexes.Store(re, r)
	return r, nil
}

// heartbeat applies one valid heartbeat to d (Kafka's consumerGroupHeartbeat) and
// reports whether d changed (a successful heartbeat always does: it extends the
// member's session).
// acls are the Kafka ACLs a regex subscription is authorized with (nil only when the
// request carries no RegexAuthorization).
func (c *Coordinator) heartbeat(d *doc, req *coordinatorv1.ConsumerGroupHeartbeatRequest, topics []topicInfo, acls *kafkaacl.Set, now time.Time) (outcome, bool) {
	id, e := req.GetMemberId(), req.GetMemberEpoch()
	if e == epochLeave || e == epochStaticLeave {
		return c.leave(d, req, topics, now)
	}
	bump := false
	m := d.Members[id]
	var replaced *member
	if e == epochJoin {
		if req.InstanceId != nil {
			if old := d.byInstance(req.GetInstanceId()); old != nil && old.ID != id {
				if old.Epoch != epochStaticLeave {
					return fail(kerr.UnreleasedInstanceID, "Static member %s with instance id %s is not released yet.", old.ID, req.GetInstanceId()), false
				}
				replaced = old
			}
		}
		switch {
		case replaced != nil:
			// KIP-848 static membership: the new member id takes the old member's
			// place, epoch and assignment.
			m = &member{}
			*m = *replaced
			m.ID = id
			m.Epoch = replaced.PrevEpoch
			delete(d.Members, replaced.ID)
			d.Target[id] = d.Target[replaced.ID]
			delete(d.Target, replaced.ID)
			d.Members[id] = m
		case m != nil:
			// A member joining again under its id owns nothing (its request says so):
			// it starts over.
			m.Epoch, m.PrevEpoch, m.State = epochJoin, epochJoin, stateStable
			m.Assigned, m.Revoking, m.RevokeDeadline = assignment{}, nil, time.Time{}
		default:
			if c.cfg.MaxSize > 0 && len(d.Members) >= c.cfg.MaxSize {
				return fail(kerr.GroupMaxSizeReached, "The consumer group has reached its maximum capacity of %d members.", c.cfg.MaxSize), false
			}
			m = &member{ID: id, State: stateStable, Assigned: assignment{}}
			d.Members[id] = m
			bump = true
		}
	} else {
		if m == nil {
			return fail(kerr.UnknownMemberID, "Member %s is not a member of group.", id), false
		}
		if req.InstanceId != nil && (m.InstanceID == nil || *m.InstanceID != req.GetInstanceId()) {
			return fail(kerr.FencedInstanceID, "Member %s does not have instance id %s.", id, req.GetInstanceId()), false
		}
		if e > m.Epoch || (e < m.Epoch && (e != m.PrevEpoch || !ownedSubset(req, m.Assigned))) {
			return fail(kerr.FencedMemberEpoch, "The consumer group member has a %s member epoch (%d) than the one known by the group coordinator (%d).",
				map[bool]string{true: "greater", false: "smaller"}[e > m.Epoch], e, m.Epoch), false
		}
	}
	if req.InstanceId != nil && m.InstanceID == nil {
		v := req.GetInstanceId()
		m.InstanceID = &v
	}
	if req.RackId != nil {
		v := req.GetRackId()
		m.RackID = &v
	}
	m.ClientID, m.ClientHost = req.GetClientId(), req.GetClientHost()
	if rt := req.GetRebalanceTimeoutMs(); rt != -1 && rt != m.RebalanceTimeoutMs {
		m.RebalanceTimeoutMs = rt
	}
	if req.GetHasSubscribedTopicNames() {
		names := slices.Clone(req.GetSubscribedTopicNames())
		sort.Strings(names)
		names = slices.Compact(names)
		if !slices.Equal(names, m.Topics) {
			m.Topics, bump = names, true
		}
	}
	if req.SubscribedTopicRegex != nil && req.GetSubscribedTopicRegex() != m.Regex {
		m.Regex, bump = req.GetSubscribedTopicRegex(), true
	}
	if c.authorizeRegex(m, req.GetRegexAuthorization(), topics, acls) {
		bump = true
	}
	if req.ServerAssignor != nil && req.GetServerAssignor() != m.Assignor {
		m.Assignor, bump = req.GetServerAssignor(), true
	}
	m.SessionDeadline = now.Add(c.cfg.SessionTimeout)
	if c.refreshTopics(d, topics) {
		bump = true
	}
	if bump {
		d.GroupEpoch++
	}
	c.maybeAssign(d)
	before := m.Assigned.clone()
	c.reconcile(d, m, owned(req), now)
	full := req.GetRebalanceTimeoutMs() != -1 && (req.GetHasSubscribedTopicNames() || req.SubscribedTopicRegex != nil) && req.GetHasTopicPartitions()
	return outcome{member: m, epoch: m.Epoch, sendAll: e == epochJoin || full || !m.Assigned.equal(before)}, true
}

// leave removes a member (epoch -1), or marks a static member away (-2): it keeps its
// partitions until its session times out or its instance id comes back.
func (c *Coordinator) leave(d *doc, req *coordinatorv1.ConsumerGroupHeartbeatRequest, topics []topicInfo, now time.Time) (outcome, bool) {
	id, e := req.GetMemberId(), req.GetMemberEpoch()
	m := d.Members[id]
	if m == nil && req.InstanceId != nil {
		m = d.byInstance(req.GetInstanceId())
	}
	if m == nil {
		return fail(kerr.UnknownMemberID, "Member %s is not a member of group.", id), false
	}
	if req.InstanceId != nil && (m.InstanceID == nil || *m.InstanceID != req.GetInstanceId() || m.ID != id) {
		return fail(kerr.FencedInstanceID, "Member %s does not have instance id %s.", id, req.GetInstanceId()), false
	}
	if e == epochStaticLeave {
		if m.Epoch != epochStaticLeave {
			m.PrevEpoch = m.Epoch
		}
		m.Epoch = epochStaticLeave
		m.SessionDeadline = now.Add(c.cfg.SessionTimeout)
		return outcome{member: m, epoch: epochStaticLeave}, true
	}
	c.remove(d, m.ID, topics)
	return outcome{member: m, epoch: epochLeave}, true
}

// remove takes member id out of the group and computes the new target assignment.
func (c *Coordinator) remove(d *doc, id string, topics []topicInfo) {
	delete(d.Members, id)
	delete(d.Target, id)
	c.refreshTopics(d, topics)
	d.GroupEpoch++
	c.maybeAssign(d)
}

// refreshTopics records the subscribed topics' ids and partition counts; it reports a
// change (a topic created, deleted or grown), which bumps the group epoch.
func (c *Coordinator) refreshTopics(d *doc, topics []topicInfo) bool {
	next := map[string]topicMeta{}
	for _, m := range d.Members {
		for _, t := range c.subscribed(m, topics) {
			next[t.Name] = topicMeta{ID: t.ID, Partitions: t.Partitions}
		}
	}
	if len(next) == len(d.Topics) {
		same := true
		for n, t := range next {
			if d.Topics[n] != t {
				same = false
				break
			}
		}
		if same {
			return false
		}
	}
	d.Topics = next
	return true
}

// authorizeRegex sets the caller member m's regex is authorized for (az, from this
// heartbeat: nil when the gateway's authorizer is off or the caller is a super
// user) and the regex's matches among topics it may DESCRIBE (Kafka's
// filterTopicDescribeAuthorizedTopics, KIP-848), and reports whether what m
// subscribes to changed. Kafka resolves a group's regex with the rights of the member
// whose heartbeat refreshed it; here each member's matches are its own principal's,
// so a member never gets a topic it may not describe. Named topics are not filtered:
// the gateway refuses a heartbeat naming one with TOPIC_AUTHORIZATION_FAILED.
func (c *Coordinator) authorizeRegex(m *member, az *coordinatorv1.RegexAuthorization, topics []topicInfo, acls *kafkaacl.Set) bool {
	var next *regexAuthz
	if az != nil {
		next = &regexAuthz{Principal: az.GetPrincipal(), Host: az.GetHost(), AllowIfNoACL: az.GetAllowIfNoAcl()}
	}
	var allowed []string
	if next != nil && m.Regex != "" {
		if acls == nil {
			acls = kafkaacl.NewSet(nil)
		}
		re, _ := c.regex(m.Regex)
		rules := kafkaacl.Rules{AllowIfNoACL: next.AllowIfNoACL}
		for _, t := range topics {
			if re != nil && re.MatchString(t.Name) && acls.Authorize(rules, kafkaacl.Action{Principal: next.Principal, Host: next.Host,
				Operation: kafkaacl.OpDescribe, ResourceType: kafkaacl.ResourceTopic, ResourceName: t.Name}) {
				allowed = append(allowed, t.Name)
			}
		}
		sort.Strings(allowed)
	}
	changed := (m.Authz == nil) != (next == nil) || !slices.Equal(allowed, m.RegexAllowed)
	m.Authz, m.RegexAllowed = next, allowed
	return changed
}

// subscribed resolves a member's subscription against the topics that exist: its
// names, and the topics its regex matches whole (internal topics included, as Kafka
// 4's broker-side resolution matches them), with an authorized member only those it
// may describe (authorizeRegex).
func (c *Coordinator) subscribed(m *member, topics []topicInfo) []topicInfo {
	var re *regexp.Regexp
	if m.Regex != "" {
		re, _ = c.regex(m.Regex)
	}
	var out []topicInfo
	for _, t := range topics {
		_, named := slices.BinarySearch(m.Topics, t.Name)
		matched := re != nil && re.MatchString(t.Name)
		if matched && m.Authz != nil {
			_, matched = slices.BinarySearch(m.RegexAllowed, t.Name)
		}
		if named || matched {
			out = append(out, t)
		}
	}
	return out
}

// maybeAssign computes a new target assignment when the group epoch moved past it.
func (c *Coordinator) maybeAssign(d *doc) {
	if d.GroupEpoch <= d.AssignmentEpoch {
		return
	}
	spec := assignorSpec{subs: map[string][]string{}, partitions: map[string]int32{}, current: d.Target}
	byName := map[string]topicMeta{}
	for n, t := range d.Topics {
		spec.partitions[t.ID] = t.Partitions
		byName[n] = t
	}
	topics := make([]topicInfo, 0, len(d.Topics))
	for n, t := range d.Topics {
		topics = append(topics, topicInfo{Name: n, ID: t.ID, Partitions: t.Partitions})
	}
	for id, m := range d.Members {
		var ids []string
		for _, t := range c.subscribed(m, topics) {
			ids = append(ids, t.ID)
		}
		spec.subs[id] = ids
	}
	d.Assignor = c.pickAssignor(d)
	d.Target = assign(d.Assignor, spec)
	d.AssignmentEpoch = d.GroupEpoch
}

// pickAssignor is the assignor most members ask for (ties by name), else the first
// configured one (Kafka's consumer group assignor selection).
func (c *Coordinator) pickAssignor(d *doc) string {
	votes := map[string]int{}
	for _, m := range d.Members {
		if m.Assignor != "" {
			votes[m.Assignor]++
		}
	}
	best := ""
	for a, n := range votes {
		if best == "" || n > votes[best] || (n == votes[best] && a < best) {
			best = a
		}
	}
	if best == "" {
		best = c.cfg.Assignors[0]
	}
	return best
}

// reconcile moves member m toward its target assignment (Kafka's
// CurrentAssignmentBuilder): partitions leaving it are revoked first (the member
// acknowledges by a heartbeat whose owned partitions no longer hold them), and a
// partition is given to it only once no other member owns or is revoking it.
// owned is nil when the request did not say.
func (c *Coordinator) reconcile(d *doc, m *member, owned assignment, now time.Time) {
	if m.Epoch == epochStaticLeave {
		return
	}
	if m.State == stateUnrevoked {
		if owned == nil || !owned.intersect(m.Revoking).empty() {
			return
		}
		m.Revoking, m.RevokeDeadline = nil, time.Time{}
	} else if m.Epoch == d.AssignmentEpoch && m.State == stateStable {
		return
	}
	target := d.Target[m.ID]
	keep := m.Assigned.intersect(target)
	revoke := m.Assigned.minus(target)
	if !revoke.empty() {
		m.Assigned, m.Revoking, m.State = keep, revoke, stateUnrevoked
		timeout := time.Duration(m.RebalanceTimeoutMs) * time.Millisecond
		if timeout <= 0 {
			timeout = c.cfg.SessionTimeout
		}
		m.RevokeDeadline = now.Add(timeout)
		return
	}
	taken := assignment{}
	for id, o := range d.Members {
		if id == m.ID {
			continue
		}
		for t, ps := range o.Assigned {
			for _, p := range ps {
				taken.add(t, p)
			}
		}
		for t, ps := range o.Revoking {
			for _, p := range ps {
				taken.add(t, p)
			}
		}
	}
	next := keep.clone()
	unreleased := false
	for t, ps := range target.minus(keep) {
		for _, p := range ps {
			if taken.contains(t, p) {
				unreleased = true
				continue
			}
			next.add(t, p)
		}
	}
	if m.Epoch != d.AssignmentEpoch {
		m.PrevEpoch, m.Epoch = m.Epoch, d.AssignmentEpoch
	}
	m.Assigned = next
	m.State = stateStable
	if unreleased {
		m.State = stateUnreleased
	}
}

// owned is the request's owned partitions (nil when not sent).
func owned(req *coordinatorv1.ConsumerGroupHeartbeatRequest) assignment {
	if !req.GetHasTopicPartitions() {
		return nil
	}
	a := assignment{}
	for _, t := range req.GetTopicPartitions() {
		if len(t.GetTopicId()) != 16 {
			continue
		}
		h := idHex([16]byte(t.GetTopicId()))
		for _, p := range t.GetPartitions() {
			a.add(h, p)
		}
	}
	return a
}

// ownedSubset: a request at the previous epoch (its answer was lost) is accepted when
// it owns no more than the member is assigned now.
func ownedSubset(req *coordinatorv1.ConsumerGroupHeartbeatRequest, assigned assignment) bool {
	o := owned(req)
	return o == nil || o.minus(assigned).empty()
}

// expire removes members whose session ended and fences members that did not revoke
// within their rebalance timeout; it reports whether d changed.
func (c *Coordinator) expire(d *doc, topics []topicInfo, now time.Time) []string {
	var gone []string
	for id, m := range d.Members {
		if !m.SessionDeadline.After(now) || (!m.RevokeDeadline.IsZero() && !m.RevokeDeadline.After(now)) {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		c.remove(d, id, topics)
	}
	return gone
}
