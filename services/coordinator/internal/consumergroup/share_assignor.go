package consumergroup

import (
	"slices"
	"sort"
)

// assignSimple is the share groups' "simple" assignor (KIP-932), per subscribed topic:
// with no more subscribers than partitions each partition goes to one subscriber and
// the counts differ by at most one; with more subscribers than partitions each
// partition goes to ceil(subscribers/partitions) of them, so every subscriber gets at
// least one. Assignments of the current target that still fit are kept (sticky); the
// extra slots of uneven splits go to the members with the least so far, so topics do
// not all load the same members. The result has an entry for every member.
func assignSimple(s assignorSpec) map[string]assignment {
	out := make(map[string]assignment, len(s.subs))
	for id := range s.subs {
		out[id] = assignment{}
	}
	by := s.subscribers()
	topics := make([]string, 0, len(by))
	for t := range by {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	load := map[string]int{} // partitions given so far, over all topics
	for _, t := range topics {
		subs, n := by[t], int(s.partitions[t])
		if n <= 0 {
			continue
		}
		sharing := (len(subs) + n - 1) / n
		slots := sharing * n
		// Each subscriber's quota: slots spread evenly, the remainder to the least
		// loaded (ties by id).
		order := slices.Clone(subs)
		slices.SortStableFunc(order, func(a, b string) int { return load[a] - load[b] })
		quota := map[string]int{}
		for i, m := range order {
			quota[m] = slots / len(subs)
			if i < slots%len(subs) {
				quota[m]++
			}
		}
		holders := make([][]string, n)
		count := map[string]int{}
		holds := func(p int, m string) bool { return slices.Contains(holders[p], m) }
		give := func(p int, m string) {
			holders[p] = append(holders[p], m)
			count[m]++
			out[m].add(t, int32(p))
		}
		for _, m := range subs {
			for _, p := range s.current[m][t] {
				if int(p) < n && count[m] < quota[m] && len(holders[p]) < sharing && !holds(int(p), m) {
					give(int(p), m)
				}
			}
		}
		// Fill every partition up to its sharing, from the member furthest below
		// its quota.
		for p := range n {
			for len(holders[p]) < sharing {
				best := ""
				for _, m := range subs {
					if count[m] < quota[m] && !holds(p, m) && (best == "" || quota[m]-count[m] > quota[best]-count[best]) {
						best = m
					}
				}
				if best == "" {
					break
				}
				give(p, best)
			}
		}
		// Stickiness can leave a member below its quota with every partition it lacks
		// already full: it takes the least shared of those.
		for _, m := range subs {
			for count[m] < quota[m] {
				best := -1
				for p := range n {
					if !holds(p, m) && (best < 0 || len(holders[p]) < len(holders[best])) {
						best = p
					}
				}
				if best < 0 {
					break
				}
				give(best, m)
			}
		}
		for _, m := range subs {
			load[m] += count[m]
		}
	}
	return out
}
