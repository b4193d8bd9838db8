package sbr_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/sbr"
)

// TestDelConfigRefused: sbr's config edited in place after ADD into one ADD
// refuses (three gateways) does not stop DEL (twice): the rule and the
// table's routes go (issue 62).
func TestDelConfigRefused(t *testing.T) {
	w := newWorld(t)
	c := w.conf(t, "eth0", w.eth0, "10.61.1.1", nil)
	w.n.DelRefused(sbr.Role, w.pod, c, map[string]any{"gateways": []string{"10.61.1.1", "10.61.1.9", "10.61.1.8"}}, "gateways")
	if got := rulesFrom(t, w.pod.Netns, w.eth0); len(got) != 0 {
		t.Errorf("after DEL: rules from eth0's address to %v", got)
	}
}
