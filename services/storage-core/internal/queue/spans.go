package queue

import (
	"sort"

	bolt "go.etcd.io/bbolt"
)

// span is the half-open range of queue offsets [From, To).
type span struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// spans is a sorted list of disjoint, non-adjacent spans: acked offsets ahead of the
// window. Acks above a message that is never acked pile up as one span, not as one
// entry per message.
type spans []span

// add adds off, merging with its neighbours. Adding in increasing order is O(1).
func (s *spans) add(off int64) {
	v := *s
	i := sort.Search(len(v), func(i int) bool { return v[i].To >= off })
	switch {
	case i < len(v) && v[i].From <= off && off < v[i].To:
		return // present
	case i < len(v) && v[i].To == off: // extends v[i]
		v[i].To++
		if i+1 < len(v) && v[i+1].From == v[i].To {
			v[i].To = v[i+1].To
			v = append(v[:i+1], v[i+2:]...)
		}
	case i < len(v) && v[i].From == off+1: // extends v[i] down
		v[i].From--
	default:
		v = append(v, span{})
		copy(v[i+1:], v[i:])
		v[i] = span{off, off + 1}
	}
	*s = v
}

// contains reports whether off is in s.
func (s spans) contains(off int64) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i].To > off })
	return i < len(s) && s[i].From <= off
}

// dropBelow removes the offsets below off.
func (s *spans) dropBelow(off int64) {
	v := *s
	i := 0
	for i < len(v) && v[i].To <= off {
		i++
	}
	v = v[i:]
	if len(v) > 0 && v[0].From < off {
		v[0].From = off
	}
	*s = v
}

// count is the number of offsets of s in [from, to).
func (s spans) count(from, to int64) int64 {
	var n int64
	for _, sp := range s {
		lo, hi := max(sp.From, from), min(sp.To, to)
		if hi > lo {
			n += hi - lo
		}
	}
	return n
}

// raiseFloor moves floor past the spans that start at or below it and removes them.
func (s *spans) raiseFloor(floor int64) int64 {
	for len(*s) > 0 && (*s)[0].From <= floor {
		floor = max(floor, (*s)[0].To)
		*s = (*s)[1:]
	}
	s.dropBelow(floor)
	return floor
}

// The acked bucket holds spans: key = first offset, value = end offset (8 bytes
// each). An empty value (a single offset) is read as [key, key+1).

// putAckedRange adds the offsets [from, to) to the acked spans of bucket b, merging
// them with every span they overlap or touch.
func putAckedRange(b *bolt.Bucket, from, to int64) error {
	if to-from == 1 {
		return putAckedOffset(b, from)
	}
	c := b.Cursor()
	var pk, pv []byte
	if k, _ := c.Seek(offKey(from)); k == nil {
		pk, pv = c.Last()
	} else {
		pk, pv = c.Prev()
	}
	if pk != nil && spanEnd(pk, pv) >= from {
		from = keyOff(pk)
		to = max(to, spanEnd(pk, pv))
	}
	var drop [][]byte
	for k, v := c.Seek(offKey(from)); k != nil && keyOff(k) <= to; k, v = c.Next() {
		to = max(to, spanEnd(k, v))
		if keyOff(k) != from {
			drop = append(drop, append([]byte(nil), k...))
		}
	}
	for _, k := range drop {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return b.Put(offKey(from), offKey(to))
}

// putAckedOffset adds off to the acked spans of bucket b, merging with neighbours.
func putAckedOffset(b *bolt.Bucket, off int64) error {
	from, to := off, off+1
	c := b.Cursor()
	k, _ := c.Seek(offKey(off))
	if k != nil && keyOff(k) == off {
		return nil // a span starts here
	}
	var v []byte
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	if k != nil {
		pf, pt := keyOff(k), spanEnd(k, v)
		if pt > off {
			return nil // inside the previous span
		}
		if pt == off {
			from = pf
		}
	}
	if nv := b.Get(offKey(to)); nv != nil {
		end := spanEnd(offKey(to), nv)
		if err := b.Delete(offKey(to)); err != nil {
			return err
		}
		to = end
	}
	return b.Put(offKey(from), offKey(to))
}

func spanEnd(k, v []byte) int64 {
	if len(v) == 8 {
		return keyOff(v)
	}
	return keyOff(k) + 1
}

// trimAckedBelow drops the acked spans below floor from bucket b (a span across the
// floor is cut to start at it).
func trimAckedBelow(b *bolt.Bucket, floor int64) error {
	type kv struct{ from, to int64 }
	var drop []kv
	c := b.Cursor()
	for k, v := c.First(); k != nil && keyOff(k) < floor; k, v = c.Next() {
		drop = append(drop, kv{keyOff(k), spanEnd(k, v)})
	}
	for _, d := range drop {
		if err := b.Delete(offKey(d.from)); err != nil {
			return err
		}
		if d.to > floor {
			if err := b.Put(offKey(floor), offKey(d.to)); err != nil {
				return err
			}
		}
	}
	return nil
}

// readAckedSpans loads the acked spans of bucket b.
func readAckedSpans(b *bolt.Bucket) (spans, error) {
	var out spans
	err := b.ForEach(func(k, v []byte) error {
		sp := span{keyOff(k), spanEnd(k, v)}
		if n := len(out); n > 0 && out[n-1].To >= sp.From {
			out[n-1].To = max(out[n-1].To, sp.To)
			return nil
		}
		out = append(out, sp)
		return nil
	})
	return out, err
}
