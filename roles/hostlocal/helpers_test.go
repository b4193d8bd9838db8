package hostlocal_test

import (
	"testing"

	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/roles/internal/roletest"
)

// env is one CNI call's environment.
type env = map[string]string

// newNode returns a store directory that CNI calls share.
func newNode(t testing.TB) *roletest.IPAMNode { return roletest.NewIPAMNode(t, hostlocal.Role) }

var (
	conf        = roletest.IPAMConf
	parseResult = roletest.ParseIPAM
	checkErr    = roletest.CheckErr
)
