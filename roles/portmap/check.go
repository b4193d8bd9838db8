package portmap

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/internal/podns"
)

// portmapCheck verifies that the node forwards exactly the configured host
// ports to the pod addresses of prevResult: every element is there with
// that data and carries the attachment's name, and the attachment's record
// lists exactly those.
func portmapCheck(_ context.Context, a *cniplug.Args, c *portmapConf, prev *current.Result) error {
	owner := pmOwner(a.Conf.Name, a.ContainerID, a.IfName)
	want, err := c.portMaps(owner, podPrefixes(prev, a.IfName))
	if err != nil {
		return err
	}
	if c.hasHostIP() {
		// As ADD: a hostIP that is not (or no longer) the node's is refused.
		err := podns.InHost(func(host *netops.Handle) error { return c.checkHostIPs(host.OwnAddr) })
		if err != nil {
			return err
		}
	}
	rec, found, err := pmRecord(a, c)
	if err != nil {
		return err
	}
	var recorded nft.PortMaps
	if found {
		recorded = portMapsOf(rec)
	}
	if d := diffPortMaps(want, recorded); d != "" {
		return cniplug.Errorf(types.ErrIOFailure, "port mappings: the record of the attachment differs from the config and prevResult: %s", d)
	}
	if want.Empty() {
		return nil
	}

	host, err := podns.Host()
	if err != nil {
		return err
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
		return cniplug.Errorf(types.ErrIOFailure, "port mappings in table inet %s: %s", nft.PortMapTable, strings.Join(problems, "; "))
	}
	return nil
}

// diffPortMaps describes how got differs from want ("" if not at all),
// ignoring order.
func diffPortMaps(want, got nft.PortMaps) string {
	d := diffElems(want.Mappings, got.Mappings, "%s")
	d = append(d, diffElems(want.Masq, got.Masq, "masquerade entry %+v")...)
	return strings.Join(d, "; ")
}

// diffElems describes the elements of want that got lacks ("missing ..."),
// then those of got that want lacks ("unexpected ..."), each with format.
func diffElems[T comparable](want, got []T, format string) []string {
	var d []string
	for _, side := range []struct {
		what     string
		from, in []T
	}{{"missing", want, got}, {"unexpected", got, want}} {
		for _, e := range side.from {
			if !slices.Contains(side.in, e) {
				d = append(d, side.what+" "+fmt.Sprintf(format, e))
			}
		}
	}
	return d
}
