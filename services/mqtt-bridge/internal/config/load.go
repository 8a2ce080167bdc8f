package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrInvalid is returned by Load when the file has at least one error.
var ErrInvalid = errors.New("invalid mqtt-bridge config")

// EnvPrefix starts every environment override: TRIBUTARY_MQTT_ plus the key's path in
// upper case, "-" and "." as "_" and list items by index, e.g.
// TRIBUTARY_MQTT_STORAGE_ADDR or TRIBUTARY_MQTT_CLUSTERS_0_PASSWORD. A list of strings
// is given comma-separated.
const EnvPrefix = "TRIBUTARY_MQTT_"

// Problem is one finding about a config file.
type Problem struct {
	// Line in the file (0 when it is not about one line).
	Line int
	// Path of the key, e.g. mqtt-to-kafka[0].key.
	Path string
	Msg  string
	// Warning problems do not stop the file from loading.
	Warning bool
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("line %d: %s", p.Line, p.Text())
	}
	return p.Text()
}

// In formats the problem as FILE:LINE: text, the way compilers do.
func (p Problem) In(file string) string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", file, p.Line, p.Text())
	}
	return file + ": " + p.Text()
}

// Text is the problem without its line.
func (p Problem) Text() string {
	var b strings.Builder
	if p.Warning {
		b.WriteString("warning: ")
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is a list of findings; Err is non-nil when one is an error.
type Problems []Problem

// Err joins the errors (not the warnings) into one, wrapping ErrInvalid.
func (ps Problems) Err() error {
	var msgs []string
	for _, p := range ps {
		if !p.Warning {
			msgs = append(msgs, p.String())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(msgs, "\n  "))
}

// LoadFile reads and loads path with the process environment.
func LoadFile(path string) (*Config, Problems, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	cfg, ps, asked := load(data, os.LookupEnv)
	if asked != nil { // nil: the file did not parse
		ps = append(ps, unknownEnv(os.Environ(), asked)...)
	}
	return cfg, ps, ps.Err()
}

// unknownEnv warns about TRIBUTARY_MQTT_ variables that name no key of the loaded
// config (a typo, a list index past the file's items, a section the file does not
// have): they would be ignored without a word. Not errors: one environment may serve
// several bridges.
func unknownEnv(environ []string, asked map[string]bool) Problems {
	known := make([]string, 0, len(asked))
	for n := range asked {
		known = append(known, n)
	}
	sort.Strings(known)
	var out Problems
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) || asked[name] || name == EnvPrefix+"CONFIG" {
			continue
		}
		msg := fmt.Sprintf("environment %s names no key of this config; ignored", name)
		if near := Nearest(name, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		out = append(out, Problem{Msg: msg, Warning: true})
	}
	return out
}

type loader struct {
	lines map[string]int
	ps    Problems
}

func (l *loader) add(path, format string, args ...any) {
	l.ps = append(l.ps, Problem{Line: l.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) warn(path, format string, args ...any) {
	l.ps = append(l.ps, Problem{Line: l.line(path), Path: path, Msg: fmt.Sprintf(format, args...), Warning: true})
}

// line finds the line of path or of its nearest ancestor in the file.
func (l *loader) line(path string) int {
	for p := path; p != ""; {
		if n, ok := l.lines[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// pathAt is the key path on line, for a decoding error that names none: the one key
// there, or, for several on one line (a flow mapping), the path they share.
func (l *loader) pathAt(line int) string {
	var on []string
	for p, n := range l.lines {
		if n == line {
			on = append(on, p)
		}
	}
	var leaves []string
	for _, p := range on {
		leaf := true
		for _, q := range on {
			if len(q) > len(p) && strings.HasPrefix(q, p) && (q[len(p)] == '.' || q[len(p)] == '[') {
				leaf = false
			}
		}
		if leaf {
			leaves = append(leaves, p)
		}
	}
	if len(leaves) == 0 {
		return ""
	}
	common := leaves[0]
	for _, p := range leaves[1:] {
		for !strings.HasPrefix(p, common) || (len(p) > len(common) && p[len(common)] != '.' && p[len(common)] != '[') {
			i := strings.LastIndexAny(common, ".[")
			if i < 0 {
				return ""
			}
			common = common[:i]
		}
	}
	return common
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// Load parses data, applies the environment (lookup) and defaults, reads secrets and
// checks everything, returning the config and every problem found. The config is
// usable only when Problems.Err is nil.
func Load(data []byte, lookup func(string) (string, bool)) (*Config, Problems) {
	cfg, ps, _ := load(data, lookup)
	return cfg, ps
}

// load is Load, also returning the environment names it looked up.
func load(data []byte, lookup func(string) (string, bool)) (*Config, Problems, map[string]bool) {
	asked := map[string]bool{}
	if lookup != nil {
		inner := lookup
		lookup = func(name string) (string, bool) {
			asked[name] = true
			return inner(name)
		}
	}
	l := &loader{lines: map[string]int{}}
	cfg := &Config{}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		l.ps = append(l.ps, yamlProblem(err)...)
		return cfg, l.ps, nil
	}
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		doc := root.Content[0]
		l.walk(doc, reflect.TypeOf(Config{}), "")
		if err := doc.Decode(cfg); err != nil {
			for _, p := range yamlProblem(err) {
				if p.Path == "" {
					p.Path = l.pathAt(p.Line)
				}
				l.ps = append(l.ps, p)
			}
		}
	}
	if lookup != nil {
		l.applyEnv(reflect.ValueOf(cfg).Elem(), "", lookup)
	}
	l.defaults(cfg)
	l.secrets(cfg)
	l.validate(cfg)
	sort.SliceStable(l.ps, func(i, j int) bool { return l.ps[i].Line < l.ps[j].Line })
	return cfg, l.ps, asked
}

func yamlProblem(err error) []Problem {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []Problem
	for _, m := range msgs {
		if sm := lineRE.FindStringSubmatch(m); sm != nil {
			n, _ := strconv.Atoi(sm[1])
			out = append(out, Problem{Line: n, Msg: sm[2]})
			continue
		}
		out = append(out, Problem{Msg: m})
	}
	return out
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// walk records the line of every key and reports keys the type does not have.
func (l *loader) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t == reflect.TypeOf(time.Duration(0)) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				l.ps = append(l.ps, Problem{Line: n.Line, Path: path, Msg: "expected a mapping of keys"})
			}
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			l.lines[p] = k.Line
			f, ok := fields[k.Value]
			if !ok {
				names := make([]string, 0, len(fields))
				for name := range fields {
					names = append(names, name)
				}
				msg := fmt.Sprintf("unknown key %q", k.Value)
				if near := Nearest(k.Value, names); near != "" {
					msg += fmt.Sprintf("; did you mean %q?", near)
				}
				l.ps = append(l.ps, Problem{Line: k.Line, Path: p, Msg: msg})
				continue
			}
			l.walk(v, f.Type, p)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return // the decoder reports the type error
		}
		for i, it := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			l.lines[p] = it.Line
			l.walk(it, t.Elem(), p)
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func yamlFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = f
	}
	return out
}

// Nearest returns the candidate closest to s by edit distance ("" when there are none).
func Nearest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", -1
	for _, c := range candidates {
		if d := distance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// EnvName is the environment variable overriding the key at path (as Problem.Path
// writes it).
func EnvName(path string) string {
	r := strings.NewReplacer("-", "_", ".", "_", "[", "_", "]", "")
	return EnvPrefix + strings.ToUpper(r.Replace(path))
}

var durationType = reflect.TypeOf(time.Duration(0))

// applyEnv sets every scalar (and string list) field whose variable is set.
func (l *loader) applyEnv(v reflect.Value, path string, lookup func(string) (string, bool)) {
	t := v.Type()
	switch {
	case t == reflect.TypeOf(HeaderSpec{}):
		return
	case t.Kind() == reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			l.applyEnv(v.Field(i), join(path, name), lookup)
		}
		return
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.String:
		for i := 0; i < v.Len(); i++ {
			l.applyEnv(v.Index(i), fmt.Sprintf("%s[%d]", path, i), lookup)
		}
		return
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if !v.IsNil() {
			l.applyEnv(v.Elem(), path, lookup)
		}
		return
	}
	name := EnvName(path)
	s, ok := lookup(name)
	if !ok {
		return
	}
	if err := setScalar(v, s); err != nil {
		l.ps = append(l.ps, Problem{Path: path, Msg: fmt.Sprintf("environment %s=%q: %v", name, s, err)})
	}
}

func setScalar(v reflect.Value, s string) error {
	if v.Kind() == reflect.Pointer {
		nv := reflect.New(v.Type().Elem())
		if err := setScalar(nv.Elem(), s); err != nil {
			return err
		}
		v.Set(nv)
		return nil
	}
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		v.SetBool(b)
	case v.Kind() >= reflect.Int && v.Kind() <= reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetInt(n)
	case v.Kind() >= reflect.Uint && v.Kind() <= reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(n)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		out := reflect.MakeSlice(v.Type(), len(parts), len(parts))
		for i, p := range parts {
			out.Index(i).SetString(p)
		}
		v.Set(out)
	default:
		return fmt.Errorf("cannot be set from the environment")
	}
	return nil
}
