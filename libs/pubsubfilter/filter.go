package pubsubfilter

import "strings"

// MaxLen is Google's limit on a filter's length, in bytes (256).
const MaxLen = 256

// Filter is a compiled filter expression. It is immutable and safe for concurrent use.
type Filter struct {
	expr string
	root *node // nil: matches everything
}

// Match reports whether a message with these attributes passes the filter. A nil *Filter
// matches everything.
func (f *Filter) Match(attrs map[string]string) bool {
	if f == nil || f.root == nil {
		return true
	}
	return f.root.eval(mapSource(attrs))
}

// MatchFunc is Match with a lookup function (key -> value, present), so callers holding
// headers as an ordered list need not build a map. A nil lookup means no attributes.
func (f *Filter) MatchFunc(lookup func(key string) (string, bool)) bool {
	if f == nil || f.root == nil {
		return true
	}
	if lookup == nil {
		return f.root.eval(mapSource(nil))
	}
	return f.root.eval(funcSource(lookup))
}

// String returns the expression as given.
func (f *Filter) String() string {
	if f == nil {
		return ""
	}
	return f.expr
}

type op uint8

const (
	opHas    op = iota // attributes:key
	opEq               // attributes.key = val
	opNe               // attributes.key != val
	opPrefix           // hasPrefix(attributes.key, val)
	opNot              // NOT kids[0]
	opAnd              // kids[0] AND kids[1] AND ...
	opOr               // kids[0] OR kids[1] OR ...
)

type node struct {
	op   op
	key  string
	val  string
	kids []*node
}

// source is where eval reads attributes. Both implementations are pointer-shaped, so
// turning them into a source does not allocate.
type source interface {
	get(key string) (string, bool)
}

type mapSource map[string]string

func (m mapSource) get(key string) (string, bool) {
	v, ok := m[key]
	return v, ok
}

type funcSource func(string) (string, bool)

func (f funcSource) get(key string) (string, bool) { return f(key) }

// eval recurses once per NOT or parenthesised group, which Parse bounds (maxDepth).
func (n *node) eval(s source) bool {
	switch n.op {
	case opHas:
		_, ok := s.get(n.key)
		return ok
	case opEq:
		v, ok := s.get(n.key)
		return ok && v == n.val
	case opNe:
		v, ok := s.get(n.key)
		return !ok || v != n.val
	case opPrefix:
		v, ok := s.get(n.key)
		return ok && strings.HasPrefix(v, n.val)
	case opNot:
		return !n.kids[0].eval(s)
	case opAnd:
		for _, k := range n.kids {
			if !k.eval(s) {
				return false
			}
		}
		return true
	case opOr:
		for _, k := range n.kids {
			if k.eval(s) {
				return true
			}
		}
		return false
	}
	return false
}
