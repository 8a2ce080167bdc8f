package consumergroup

import (
	"slices"
	"sort"
)

// Server-side assignors (KIP-848 group.consumer.assignors), as Kafka 4 names them.
const (
	AssignorUniform = "uniform"
	AssignorRange   = "range"
)

// assignorSpec is an assignor's input: each member's subscribed topics (resolved to
// existing topics, by hex id), the partition counts, and the current target (for
// stickiness).
type assignorSpec struct {
	subs       map[string][]string // member id -> topic ids
	partitions map[string]int32    // topic id -> partition count
	current    map[string]assignment
}

type tp struct {
	topic string
	p     int32
}

// assign runs the named assignor; the result has an entry for every member.
func assign(name string, s assignorSpec) map[string]assignment {
	out := make(map[string]assignment, len(s.subs))
	for id := range s.subs {
		out[id] = assignment{}
	}
	if name == AssignorRange {
		assignRange(s, out)
	} else {
		assignUniform(s, out)
	}
	return out
}

// subscribers returns, per topic id, the sorted ids of the members subscribed to it.
func (s assignorSpec) subscribers() map[string][]string {
	by := map[string][]string{}
	for id, topics := range s.subs {
		for _, t := range topics {
			if _, ok := s.partitions[t]; ok {
				by[t] = append(by[t], id)
			}
		}
	}
	for t := range by {
		slices.Sort(by[t])
		by[t] = slices.Compact(by[t])
	}
	return by
}

// assignRange gives each topic's subscribers contiguous ranges, in member id order:
// the first (partitions mod subscribers) members get one partition more.
func assignRange(s assignorSpec, out map[string]assignment) {
	for t, ms := range s.subscribers() {
		n := s.partitions[t]
		base, extra := n/int32(len(ms)), n%int32(len(ms))
		var next int32
		for i, m := range ms {
			k := base
			if int32(i) < extra {
				k++
			}
			for p := next; p < next+k; p++ {
				out[m].add(t, p)
			}
			next += k
		}
	}
}

// assignUniform spreads every subscribed partition evenly over its subscribers while
// moving as few as it can: a partition stays with its current owner when that member
// is still subscribed and not above its share, the rest go to the least loaded
// subscriber, then partitions move from the most to the least loaded member while
// that narrows the spread.
func assignUniform(s assignorSpec, out map[string]assignment) {
	by := s.subscribers()
	topics := make([]string, 0, len(by))
	total := 0
	for t := range by {
		topics = append(topics, t)
		total += int(s.partitions[t])
	}
	sort.Strings(topics)
	load := map[string]int{}
	owner := map[tp]string{}
	subscribed := func(m, t string) bool {
		_, ok := slices.BinarySearch(by[t], m)
		return ok
	}
	// The share a member may keep: its part if everyone subscribed to everything.
	share := 1
	if len(s.subs) > 0 {
		share = (total + len(s.subs) - 1) / len(s.subs)
	}
	members := make([]string, 0, len(s.current))
	for m := range s.current {
		members = append(members, m)
	}
	sort.Strings(members)
	for _, m := range members {
		if _, ok := out[m]; !ok {
			continue
		}
		for _, t := range sortedKeys(s.current[m]) {
			if !subscribed(m, t) {
				continue
			}
			for _, p := range s.current[m][t] {
				k := tp{t, p}
				if p >= s.partitions[t] || owner[k] != "" || load[m] >= share {
					continue
				}
				owner[k], load[m] = m, load[m]+1
			}
		}
	}
	for _, t := range topics {
		for p := int32(0); p < s.partitions[t]; p++ {
			k := tp{t, p}
			if owner[k] != "" {
				continue
			}
			best := ""
			for _, m := range by[t] {
				if best == "" || load[m] < load[best] {
					best = m
				}
			}
			owner[k], load[best] = best, load[best]+1
		}
	}
	// Even out what stickiness and uneven subscriptions left uneven.
	for moved := true; moved; {
		moved = false
		for _, t := range topics {
			for p := int32(0); p < s.partitions[t]; p++ {
				k := tp{t, p}
				from := owner[k]
				to := from
				for _, m := range by[t] {
					if load[m] < load[to] {
						to = m
					}
				}
				if load[from]-load[to] >= 2 {
					owner[k] = to
					load[from]--
					load[to]++
					moved = true
				}
			}
		}
	}
	for k, m := range owner {
		out[m].add(k.topic, k.p)
	}
}

func sortedKeys(a assignment) []string {
	ks := make([]string, 0, len(a))
	for k := range a {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
