package portmap

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// portmapCheck verifies that the node forwards exactly the configured host
// ports to the pod addresses of prevResult: every element is there with
// that data and carries the attachment's name, and the attachment's record
// lists exactly those.
func portmapCheck(_ context.Context, a *cniplug.Args) error {
	c, err := parsePortmapConf(a, true)
	if err != nil {
		return err
	}
	prev, err := a.RequirePrevResult()
	if err != nil {
		return err
	}
	owner := pmOwner(a.Conf.Name, a.ContainerID, a.IfName)
	want, err := c.portMaps(owner, podPrefixes(prev, a.IfName))
	if err != nil {
		return err
	}
	rec, found, err := pmRecord(a, c)
	if err != nil {
		return err
	}
	var recorded netops.PortMaps
	if found {
		recorded = portMapsOf(rec)
	}
	if d := diffPortMaps(want, recorded); d != "" {
		return cniplug.Errorf(types.ErrIOFailure, "port mappings: the record of the attachment differs from the config and prevResult: %s", d)
	}
	if want.Empty() {
		return nil
	}

	host, err := netops.Open("")
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	defer host.Close()
	states, err := VerifyPortMaps(host, want)
	if err != nil {
		return cniplug.WithCode(types.ErrIOFailure, err)
	}
	var problems []string
	for _, s := range states {
		if s.Problem != "" {
			problems = append(problems, s.String())
		}
	}
	if len(problems) > 0 {
		return cniplug.Errorf(types.ErrIOFailure, "port mappings in table inet %s: %s", netops.PortMapTable, strings.Join(problems, "; "))
	}
	return nil
}

// diffPortMaps describes how got differs from want ("" if not at all),
// ignoring order.
func diffPortMaps(want, got netops.PortMaps) string {
	var d []string
	for _, m := range want.Mappings {
		if !slices.Contains(got.Mappings, m) {
			d = append(d, fmt.Sprintf("missing %s", m))
		}
	}
	for _, m := range got.Mappings {
		if !slices.Contains(want.Mappings, m) {
			d = append(d, fmt.Sprintf("unexpected %s", m))
		}
	}
	for _, m := range want.Masq {
		if !slices.Contains(got.Masq, m) {
			d = append(d, fmt.Sprintf("missing masquerade entry %+v", m))
		}
	}
	for _, m := range got.Masq {
		if !slices.Contains(want.Masq, m) {
			d = append(d, fmt.Sprintf("unexpected masquerade entry %+v", m))
		}
	}
	return strings.Join(d, "; ")
}
