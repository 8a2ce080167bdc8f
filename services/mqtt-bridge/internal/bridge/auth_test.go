package bridge

import "testing"

// covers: a rule holds a topic or filter when it matches every topic the filter
// does; %u and %c are whole levels, and a name holding a wildcard matches nothing.
func TestAuthRules(t *testing.T) {
	for _, c := range []struct {
		rule, f string
		want    bool
	}{
		{"dev/#", "dev/a/b", true},
		{"dev/#", "dev/+/b", true},
		{"dev/#", "dev/#", true},
		{"dev/#", "#", false},
		{"dev/+/x", "dev/a/x", true},
		{"dev/+/x", "dev/+/x", true},
		{"dev/+/x", "dev/#", false},
		{"dev/+/x", "dev/a/y", false},
		{"dev/a", "dev/+", false},
		{"#", "$events/client/c/connected", false},
		{"$events/#", "$events/client/c/connected", true},
		{"dev/a/#", "$share/g/dev/a/#", true},
		{"dev/a/#", "$share/g/dev/+/#", false},
	} {
		if got := covers(c.rule, c.f); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.rule, c.f, got, c.want)
		}
	}
	if got := substitute("dev/%u/%c/#", "alice", "c1"); got != "dev/alice/c1/#" {
		t.Errorf("substitute = %q", got)
	}
	if covers(substitute("dev/%u/#", "a/+", "c"), "dev/a/x/y") || covers(substitute("dev/%u/#", "#", "c"), "dev/x") {
		t.Error("a user name holding / or a wildcard widened a rule")
	}
	if covers(substitute("dev/%u", "", "c"), "dev/") {
		t.Error("an empty user name matched")
	}
}
