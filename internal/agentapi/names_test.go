package agentapi

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckNames(t *testing.T) {
	for _, c := range []struct {
		ns, name string
		ok       bool
	}{
		{"default", "macvlan-conf", true},
		{"kube-system", "a.b-c.d0", true},
		{"a", "0", true},
		{strings.Repeat("a", 63), strings.Repeat("b", 253), true},
		{strings.Repeat("a", 64), "x", false},
		{"x", strings.Repeat("b", 254), false},
		{"", "x", false},
		{"x", "", false},
		{"Default", "x", false},
		{"-a", "x", false},
		{"a-", "x", false},
		{"a.b", "x", false},
		{"x", "a..b", false},
		{"x", ".a", false},
		{"x", "a.", false},
		{"x", "a/b", false},
		{"x", "../etc", false},
		{"x", "a.-b", false},
		{"x", "UPPER", false},
	} {
		err := CheckNames(c.ns, c.name)
		if (err == nil) != c.ok {
			t.Errorf("CheckNames(%q, %q) = %v, want ok=%v", c.ns, c.name, err, c.ok)
		}
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.Reason != ReasonBadRequest) {
			t.Errorf("CheckNames(%q, %q): %v is not a BadRequest *Error", c.ns, c.name, err)
		}
	}
}
