package pubsubfilter

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxDepth caps parenthesis nesting so that neither the parser nor eval can recurse
// without bound. Google documents no limit; 32 is far beyond any real filter.
const maxDepth = 32

// Parse compiles a filter expression. "" gives a Filter that matches everything.
// Errors wrap ErrInvalid and say where (byte offset) and what is wrong.
func Parse(expr string) (*Filter, error) {
	if len(expr) > MaxLen {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrInvalid, len(expr), MaxLen)
	}
	if expr == "" {
		return &Filter{}, nil
	}
	for i := 0; i < len(expr); {
		r, size := utf8.DecodeRuneInString(expr[i:])
		if r == utf8.RuneError && size == 1 {
			return nil, errAt(i, "not valid UTF-8")
		}
		i += size
	}
	p := &parser{src: expr}
	p.skipSpace()
	if p.eof() {
		return nil, errAt(0, "only whitespace; an empty filter is written as \"\"")
	}
	root, err := p.expr()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if !p.eof() {
		if p.peek() == ')' {
			return nil, errAt(p.pos, "unmatched )")
		}
		return nil, errAt(p.pos, "unexpected %s; want AND, OR or the end of the filter", p.describe())
	}
	return &Filter{expr: expr, root: root}, nil
}

type parser struct {
	src   string
	pos   int
	depth int
}

func (p *parser) eof() bool  { return p.pos >= len(p.src) }
func (p *parser) peek() byte { return p.src[p.pos] }

func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }

// skipSpace skips whitespace and reports whether there was any.
func (p *parser) skipSpace() bool {
	start := p.pos
	for !p.eof() && isSpace(p.peek()) {
		p.pos++
	}
	return p.pos > start
}

// spaceFollows reports whether whitespace (or the end) follows the current position.
func (p *parser) spaceFollows() bool { return p.eof() || isSpace(p.peek()) }

// word returns the identifier-like run [A-Za-z0-9_]* at the current position without
// consuming it.
func (p *parser) word() string {
	end := p.pos
	for end < len(p.src) && (isLetter(p.src[end]) || isDigit(p.src[end]) || p.src[end] == '_') {
		end++
	}
	return p.src[p.pos:end]
}

// describe names what is at the current position, for error messages.
func (p *parser) describe() string {
	if p.eof() {
		return "end of filter"
	}
	if w := p.word(); w != "" {
		return fmt.Sprintf("%q", w)
	}
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return fmt.Sprintf("%q", r)
}

// expr parses terms joined by AND, or by OR, but not by both.
func (p *parser) expr() (*node, error) {
	first, err := p.term()
	if err != nil {
		return nil, err
	}
	var kids []*node
	var join op
	joinName := ""
	for {
		save := p.pos
		spaced := p.skipSpace()
		w := p.word()
		var o op
		switch w {
		case "AND":
			o = opAnd
		case "OR":
			o = opOr
		case "and", "or", "And", "Or":
			return nil, errAt(p.pos, "operators are uppercase: write %q", upper(w))
		default:
			p.pos = save
			if kids == nil {
				return first, nil
			}
			return &node{op: join, kids: kids}, nil
		}
		if !spaced {
			return nil, errAt(p.pos, "want whitespace before %s", w)
		}
		if joinName != "" && o != join {
			return nil, errAt(p.pos, "%s after %s: AND and OR cannot be mixed without parentheses", w, joinName)
		}
		join, joinName = o, w
		opPos := p.pos
		p.pos += len(w)
		if !p.spaceFollows() {
			return nil, errAt(p.pos, "want whitespace after %s", w)
		}
		p.skipSpace()
		if p.eof() {
			return nil, errAt(opPos, "%s at the end of the filter; want a condition after it", w)
		}
		next, err := p.term()
		if err != nil {
			return nil, err
		}
		if kids == nil {
			kids = []*node{first}
		}
		kids = append(kids, next)
	}
}

func upper(w string) string {
	b := []byte(w)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// term parses an optionally negated primary.
func (p *parser) term() (*node, error) {
	neg := false
	switch {
	case p.eof():
	case p.peek() == '-':
		p.pos++
		if p.spaceFollows() {
			return nil, errAt(p.pos-1, "- must touch its operand: write -attributes:k")
		}
		neg = true
	case p.word() == "NOT":
		p.pos += len("NOT")
		if !p.spaceFollows() {
			return nil, errAt(p.pos, "want whitespace after NOT")
		}
		p.skipSpace()
		neg = true
	case p.word() == "not" || p.word() == "Not":
		return nil, errAt(p.pos, "operators are uppercase: write \"NOT\"")
	}
	n, err := p.primary(neg)
	if err != nil {
		return nil, err
	}
	if neg {
		return &node{op: opNot, kids: []*node{n}}, nil
	}
	return n, nil
}

// primary parses a parenthesised expression or one condition.
func (p *parser) primary(negated bool) (*node, error) {
	if p.eof() {
		return nil, errAt(p.pos, "unexpected end of filter; want a condition")
	}
	start := p.pos
	switch c := p.peek(); {
	case c == '(':
		p.depth++
		if p.depth > maxDepth {
			return nil, errAt(start, "parentheses nested more than %d deep", maxDepth)
		}
		p.pos++
		p.skipSpace()
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.eof() {
			return nil, errAt(start, "unclosed (")
		}
		if p.peek() != ')' {
			return nil, errAt(p.pos, "unexpected %s; want AND, OR or )", p.describe())
		}
		p.pos++
		p.depth--
		return n, nil
	case c == '-' || (negated && p.word() == "NOT"):
		return nil, errAt(start, "one negation per term: write NOT (NOT ...)")
	case c == '"' || c == '\'':
		return nil, errAt(start, "want a condition, not a string literal")
	}
	w := p.word()
	switch {
	case w == "":
		return nil, errAt(start, "unexpected %s; want a condition", p.describe())
	case w == "attributes":
		p.pos += len(w)
		return p.attribute()
	case w == "AND" || w == "OR":
		return nil, errAt(start, "%s needs a condition before it", w)
	}
	p.pos += len(w)
	if !p.eof() && p.peek() == '(' {
		if w == "hasPrefix" {
			return p.hasPrefix()
		}
		return nil, errAt(start, "unknown function %q; hasPrefix is the only function", w)
	}
	return nil, errAt(start, "unknown name %q; a condition starts with attributes, hasPrefix, NOT, - or (", w)
}

// attribute parses what follows "attributes": ":key", or ".key" and a comparison.
func (p *parser) attribute() (*node, error) {
	if p.eof() || (p.peek() != ':' && p.peek() != '.') {
		return nil, errAt(p.pos, "want : or . right after attributes")
	}
	has := p.peek() == ':'
	p.pos++
	key, err := p.key()
	if err != nil {
		return nil, err
	}
	if has {
		return &node{op: opHas, key: key}, nil
	}
	p.skipSpace()
	opPos := p.pos
	var o op
	switch {
	case p.eof():
		return nil, errAt(p.pos, "unexpected end of filter; want = or != after attributes.%s", key)
	case strings.HasPrefix(p.src[p.pos:], "=="):
		return nil, errAt(p.pos, "use = to compare, not ==")
	case p.peek() == '=':
		o = opEq
		p.pos++
	case strings.HasPrefix(p.src[p.pos:], "!="):
		o = opNe
		p.pos += 2
	default:
		return nil, errAt(p.pos, "unexpected %s; want = or != after attributes.%s", p.describe(), key)
	}
	p.skipSpace()
	if p.eof() || p.peek() != '"' {
		if !p.eof() && p.peek() == '\'' {
			return nil, errAt(p.pos, "string literals use double quotes")
		}
		return nil, errAt(opPos, "the value compared must be a string literal")
	}
	val, err := p.str()
	if err != nil {
		return nil, err
	}
	return &node{op: o, key: key, val: val}, nil
}

// hasPrefix parses "(attributes.key, "prefix")"; the name is already consumed.
func (p *parser) hasPrefix() (*node, error) {
	open := p.pos
	p.pos++
	p.skipSpace()
	if p.word() != "attributes" || p.pos+len("attributes") >= len(p.src) || p.src[p.pos+len("attributes")] != '.' {
		return nil, errAt(p.pos, "hasPrefix takes attributes.KEY first")
	}
	p.pos += len("attributes.")
	key, err := p.key()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.eof() || p.peek() != ',' {
		return nil, errAt(p.pos, "unexpected %s; want , after the key in hasPrefix", p.describe())
	}
	p.pos++
	p.skipSpace()
	if p.eof() || p.peek() != '"' {
		return nil, errAt(p.pos, "hasPrefix takes a string literal second")
	}
	val, err := p.str()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.eof() {
		return nil, errAt(open, "unclosed ( of hasPrefix")
	}
	if p.peek() != ')' {
		return nil, errAt(p.pos, "unexpected %s; hasPrefix takes two arguments, want )", p.describe())
	}
	p.pos++
	return &node{op: opPrefix, key: key, val: val}, nil
}

// key parses an attribute key: a bare name or a string literal.
func (p *parser) key() (string, error) {
	start := p.pos
	if p.eof() {
		return "", errAt(start, "unexpected end of filter; want an attribute key")
	}
	switch c := p.peek(); {
	case c == '"':
		k, err := p.str()
		if err != nil {
			return "", err
		}
		if k == "" {
			return "", errAt(start, "empty attribute key")
		}
		return k, nil
	case c == '\'':
		return "", errAt(start, "string literals use double quotes")
	case !isLetter(c) && c != '_':
		if isDigit(c) || c == '-' || c >= utf8.RuneSelf {
			return "", errAt(start, "a bare key starts with a letter or _; quote other keys: \"...\"")
		}
		return "", errAt(start, "unexpected %s; want an attribute key", p.describe())
	}
	for !p.eof() {
		c := p.peek()
		if !isLetter(c) && !isDigit(c) && c != '_' && c != '-' {
			break
		}
		p.pos++
	}
	if !p.eof() {
		switch c := p.peek(); {
		case isSpace(c), c == ')', c == ',', c == '=', c == '!':
		default:
			return "", errAt(p.pos, "%s in a bare key; quote keys with characters other than letters, digits, - and _", p.describe())
		}
	}
	return p.src[start:p.pos], nil
}

// str parses a double-quoted string literal at the current position.
func (p *parser) str() (string, error) {
	start := p.pos
	p.pos++
	lit := p.pos
	var buf []byte // nil until the first escape: most literals are plain substrings
	for {
		if p.eof() {
			return "", errAt(start, "unterminated string literal")
		}
		c := p.peek()
		switch {
		case c == '"':
			p.pos++
			if buf == nil {
				return p.src[lit : p.pos-1], nil
			}
			return string(buf), nil
		case c == '\\':
			if buf == nil {
				buf = append(make([]byte, 0, len(p.src)-lit), p.src[lit:p.pos]...)
			}
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			buf = utf8.AppendRune(buf, r)
		case c < 0x20 || c == 0x7f:
			return "", errAt(p.pos, "raw control character 0x%02x in a string literal; escape it", c)
		default:
			if buf != nil {
				buf = append(buf, c)
			}
			p.pos++
		}
	}
}

// escape parses one escape sequence at the current position (a backslash).
func (p *parser) escape() (rune, error) {
	start := p.pos
	p.pos++
	if p.eof() {
		return 0, errAt(start, "unterminated escape sequence")
	}
	c := p.peek()
	p.pos++
	switch c {
	case 'a':
		return '\a', nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'v':
		return '\v', nil
	case '\\', '"', '\'':
		return rune(c), nil
	case 'x':
		v, err := p.digits(start, 2, 16)
		if err != nil {
			return 0, err
		}
		if v > 0x7f {
			return 0, errAt(start, "\\x escapes stop at \\x7f; write \\u%04x", v)
		}
		return v, nil
	case 'u', 'U':
		n := 4
		if c == 'U' {
			n = 8
		}
		v, err := p.digits(start, n, 16)
		if err != nil {
			return 0, err
		}
		if !utf8.ValidRune(v) {
			return 0, errAt(start, "escape \\%c is not a Unicode code point", c)
		}
		return v, nil
	case '0', '1', '2', '3', '4', '5', '6', '7':
		p.pos--
		v, err := p.digits(start, 3, 8)
		if err != nil {
			return 0, err
		}
		if v > 0o177 {
			return 0, errAt(start, "octal escapes stop at \\177; write \\u%04x", v)
		}
		return v, nil
	}
	return 0, errAt(start, "unknown escape sequence \\%s", p.src[start+1:p.pos])
}

// digits reads exactly n digits in the given base for the escape starting at start.
func (p *parser) digits(start, n int, base rune) (rune, error) {
	var v rune
	for i := 0; i < n; i++ {
		if p.eof() {
			return 0, errAt(start, "escape sequence needs %d digits", n)
		}
		c := rune(p.peek())
		var d rune
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case base == 16 && 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case base == 16 && 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			d = base
		}
		if d >= base {
			return 0, errAt(start, "escape sequence needs %d digits", n)
		}
		v = v*base + d
		p.pos++
	}
	return v, nil
}
