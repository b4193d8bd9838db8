package sbr

import (
	"encoding/json"
	"math"
	"net/netip"

	"github.com/cnibox/cnibox/cniplug"
)

// sbrFirstTable is where the search for free tables starts when the config
// names none (the reference's firstTableID).
const sbrFirstTable = 100

type sbrConfJSON struct {
	Table          *json.Number `json:"table"`
	Gateways       []string     `json:"gateways"`
	AddSourceHints bool         `json:"addSourceHints"`
}

// sbrConf is the validated config.
type sbrConf struct {
	// table, when not 0, is the one table every rule looks up; sbr then
	// adds only the rules (the table's routes are the operator's).
	table int
	// gw4 and gw6 replace prevResult's gateways of their family.
	gw4, gw6 netip.Addr
	// sourceHints keeps the subnet routes in the main table with the
	// address as preferred source, and moves only the others.
	sourceHints bool
}

// parseSbrConf decodes and validates the sbr fields.
func parseSbrConf(a *cniplug.Args) (*sbrConf, error) {
	var j sbrConfJSON
	if err := cniplug.DecodeConf("sbr config", a.StdinData, &j); err != nil {
		return nil, err
	}
	c := &sbrConf{sourceHints: j.AddSourceHints}
	if j.Table != nil {
		t, err := j.Table.Int64()
		if err != nil || t < 1 || t > math.MaxUint32 || (t >= 253 && t <= 255) {
			return nil, cniplug.ConfError("table", "%s is not a routing table sbr can use: give a number from 1 to 4294967295 other than 253-255 (default, main, local), or leave it out to let sbr pick free tables from %d on", j.Table, sbrFirstTable)
		}
		c.table = int(t)
	}
	if len(j.Gateways) > 2 {
		return nil, cniplug.ConfError("gateways", "%d entries: give at most one IPv4 and one IPv6 gateway", len(j.Gateways))
	}
	gws, err := cniplug.ParseIPList("gateways", j.Gateways)
	if err != nil {
		return nil, err
	}
	for _, gw := range gws {
		slot := &c.gw6
		if gw.Unmap().Is4() {
			slot = &c.gw4
		}
		if slot.IsValid() {
			return nil, cniplug.ConfError("gateways", "%s and %s are of the same family: give at most one IPv4 and one IPv6 gateway", *slot, gw)
		}
		*slot = gw.Unmap()
	}
	return c, nil
}
