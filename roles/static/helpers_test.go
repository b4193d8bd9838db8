package static_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/internal/roletest"
	"github.com/cnibox/cnibox/roles/static"
)

// env is one CNI call's environment.
type env = map[string]string

// newNode returns a store directory that CNI calls share (static must
// leave it alone).
func newNode(t testing.TB) *roletest.IPAMNode { return roletest.NewIPAMNode(t, static.Role) }

var (
	conf        = roletest.IPAMConf
	parseResult = roletest.ParseIPAM
	checkErr    = roletest.CheckErr
)
