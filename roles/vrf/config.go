package vrf

import (
	"encoding/json"
	"math"

	"github.com/cnibox/cnibox/cniplug"
)

type vrfConfJSON struct {
	VRFName string       `json:"vrfname"`
	Table   *json.Number `json:"table"`
}

// vrfConf is the validated config.
type vrfConf struct {
	name  string
	table uint32 // 0: a new VRF gets the lowest table no VRF of the pod uses
}

// parseVRFConf decodes and validates the vrf fields.
func parseVRFConf(a *cniplug.Args) (*vrfConf, error) {
	var j vrfConfJSON
	if err := cniplug.DecodeConf("vrf config", a.StdinData, &j); err != nil {
		return nil, err
	}
	if j.VRFName == "" {
		return nil, cniplug.ConfError("vrfname", "missing: name the VRF device of the pod to put the interface in (e.g. \"blue\")")
	}
	if len(j.VRFName) > 15 || !validIfName(j.VRFName) {
		return nil, cniplug.ConfError("vrfname", "%q is not an interface name: at most 15 characters, no '/', ':' or white space, not '.' or '..'", j.VRFName)
	}
	c := &vrfConf{name: j.VRFName}
	if j.Table != nil {
		t, err := j.Table.Int64()
		if err != nil || t < 0 || t > math.MaxUint32 || (t >= 253 && t <= 255) {
			return nil, cniplug.ConfError("table", "%s is not a routing table a VRF can use: give a number from 1 to 4294967295 other than 253-255 (default, main, local), or leave it out to let vrf pick a free one", j.Table)
		}
		c.table = uint32(t)
	}
	return c, nil
}

// validIfName reports whether the kernel accepts s as an interface name.
func validIfName(s string) bool {
	if s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}
