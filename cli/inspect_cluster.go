package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/internal/agentapi"
	"github.com/cnibox/cnibox/internal/wbpool"
	"github.com/cnibox/cnibox/nodestate"
	"github.com/cnibox/cnibox/store"
)

// agentSocketFlag is the agent's socket (the whereabouts role's cluster
// pools are asked of it).
var agentSocketFlag = &ucli.StringFlag{Name: "agent-socket", Value: agentapi.DefaultSocket, Usage: "cnibox-agent's socket (the cluster IPAM of the whereabouts role)"}

// errNoClusterIPAM: no agent socket, so no cluster pools on this node.
var errNoClusterIPAM = errors.New("no cnibox-agent socket")

// clusterPools asks the agent for the cluster pools (whereabouts' IPPools,
// NodeSlicePools, queued releases).
func clusterPools(c *ucli.Context) ([]agentapi.IPAMPool, error) {
	sock := c.String("agent-socket")
	if sock == "" {
		sock = agentapi.DefaultSocket
	}
	if _, err := os.Stat(sock); err != nil {
		return nil, errNoClusterIPAM
	}
	ctx, cancel := context.WithTimeout(c.Context, 15*time.Second)
	defer cancel()
	resp, err := (&agentapi.Client{Socket: sock}).IPAM(ctx, agentapi.OpIPAMPools, &agentapi.IPAMRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Pools, nil
}

// inspectClusterIPAM lists the cluster pools.
func inspectClusterIPAM(c *ucli.Context) error {
	pools, err := clusterPools(c)
	if errors.Is(err, errNoClusterIPAM) {
		return fmt.Errorf("no cnibox-agent socket at %s: the cluster IPAM runs in cnibox-agent --cluster-ipam", c.String("agent-socket"))
	}
	if err != nil {
		return err
	}
	return show(c, nonNil(pools), printClusterPools, nil)
}

// clusterIPAMNetworks are the cluster pools for cnibox inspect ipam: one
// entry per IPPool (named after it: a pool is shared by every node and
// network that names its range), its size the range's addresses less the
// network and broadcast ones (range_start, range_end and exclude live in
// the network's config, not in the pool), every allocation a reservation.
// No agent socket: none; an agent that cannot read the pools: a warning.
func clusterIPAMNetworks(c *ucli.Context, only string, eps []store.Endpoint) []ipamNetwork {
	pools, err := clusterPools(c)
	if errors.Is(err, errNoClusterIPAM) {
		return nil
	}
	var ae *agentapi.Error
	if errors.As(err, &ae) && ae.Reason == agentapi.ReasonNotServed {
		return nil // an agent without the cluster IPAM
	}
	if err != nil {
		fmt.Fprintf(c.App.ErrWriter, "cnibox: the cluster pools are left out: cnibox-agent cannot read them: %v\n", err)
		return nil
	}
	var out []ipamNetwork
	for _, p := range pools {
		if p.Kind != "IPPool" || (only != "" && p.Name != only) {
			continue
		}
		_, pfx, err := wbpool.ParsePoolRange(p.Range)
		if err != nil {
			continue
		}
		size := uint64(1)<<min(pfx.Addr().BitLen()-pfx.Bits(), 63) - 1 // less the network address
		if pfx.Addr().Is4() && pfx.Bits() < 31 {
			size-- // and the broadcast
		}
		n := ipamNetwork{Network: p.Name, Reservations: []ipamReservation{},
			Pools: []ipamPool{{Range: p.Range, Subnet: pfx.Masked(), Source: "cluster IPPool (cnibox-agent; every node's)", poolUse: usage(size, uint64(len(p.Allocations)))}}}
		for _, a := range p.Allocations {
			addr, err := netip.ParseAddr(a.IP)
			if err != nil {
				continue
			}
			r := ipamReservation{Addr: addr, Subnet: pfx.Masked(), ContainerID: a.ContainerID, IfName: a.IfName, Pod: a.PodRef}
			for _, ep := range eps {
				if ep.ContainerID == a.ContainerID && ep.IfName == a.IfName {
					r.Endpoint, r.Netns = true, ep.Netns
				}
			}
			n.Reservations = append(n.Reservations, r)
		}
		out = append(out, n)
	}
	return out
}

// printClusterPools prints one row per allocation (a pool without any: one
// row), then the slices and the queued releases.
func printClusterPools(w io.Writer, pools []agentapi.IPAMPool) error {
	tw := newTable(w)
	row(tw, "KIND", "NAME", "RANGE", "ADDRESS", "POD", "CONTAINER", "IFNAME")
	for _, p := range pools {
		switch {
		case p.Kind == "PendingReleases":
			row(tw, p.Kind, p.Name, "-", strconv.Itoa(p.Pending)+" queued", "-", "-", "-")
		case len(p.Slices) > 0 || p.Kind == "NodeSlicePool":
			row(tw, p.Kind, p.Name, p.Range, orDash(strings.Join(p.Slices, " ")), "-", "-", "-")
		case len(p.Allocations) == 0:
			row(tw, p.Kind, p.Name, p.Range, "-", "-", "-", "-")
		}
		for _, a := range p.Allocations {
			row(tw, p.Kind, p.Name, p.Range, a.IP, orDash(a.PodRef), short(a.ContainerID), orDash(a.IfName))
		}
	}
	return tw.Flush()
}

// checkClusterIPAM: with an agent socket, the cluster pools are readable
// and no release waits for the API.
func (d *doctor) checkClusterIPAM(c *ucli.Context) {
	d.checkNetworkSockets(c)
	pools, err := clusterPools(c)
	if errors.Is(err, errNoClusterIPAM) {
		return
	}
	var ae *agentapi.Error
	if errors.As(err, &ae) && ae.Reason == agentapi.ReasonNotServed {
		return // an agent without the cluster IPAM
	}
	if err != nil {
		d.fail("cluster IPAM", "is the API server (or etcd) reachable from cnibox-agent, and are whereabouts' CRDs installed? See the agent's log",
			"cnibox-agent cannot read the cluster pools: %v", err)
		return
	}
	n, held := 0, 0
	for _, p := range pools {
		if p.Kind == "PendingReleases" {
			d.warn("cluster IPAM releases", "they are written when the API answers again; if this stays, see the agent's log",
				"%d releases of deleted attachments wait in %s", p.Pending, p.Name)
			continue
		}
		if p.Kind == "IPPool" {
			n++
			held += len(p.Allocations)
		}
	}
	d.pass("cluster IPAM", "%d IPPools, %d addresses held (cnibox inspect cluster-ipam)", n, held)
}

// checkNetworkSockets: every network of the config directory on an IPAM
// whose ADD asks cnibox-agent (cniplug.Known.AgentSocket) needs an agent
// at the socket it names, whichever socket --agent-socket reads the pools
// from: without one its ADDs fail with 11.
func (d *doctor) checkNetworkSockets(c *ucli.Context) {
	missing := map[string][]agentNetwork{} // socket -> networks
	for _, n := range d.agentNetworks(c.String("conf-dir")) {
		if _, err := os.Stat(n.socket); err != nil && !slices.ContainsFunc(missing[n.socket], func(m agentNetwork) bool { return m.name == n.name }) {
			missing[n.socket] = append(missing[n.socket], n)
		}
	}
	for _, sock := range slices.Sorted(maps.Keys(missing)) {
		var names []string
		for _, n := range missing[sock] {
			names = append(names, n.name)
		}
		d.fail("cluster IPAM", "start cnibox-agent with --cluster-ipam (or --cluster-ipam-only) on this node, or point agentSocket at its socket",
			"network %s uses the %s IPAM, but no cnibox-agent socket is at %s: its ADDs fail (11) and its DELs wait in the data dir",
			strings.Join(names, ", "), missing[sock][0].ipam, sock)
	}
}

// agentNetwork is a network of the config directory on an IPAM that asks
// cnibox-agent, with the agent socket it names.
type agentNetwork struct{ name, ipam, socket string }

// agentNetworks lists the networks of confDir's loadable files whose
// plugins name an IPAM that asks cnibox-agent, with the socket each names.
func (d *doctor) agentNetworks(confDir string) []agentNetwork {
	if confDir == "" {
		return nil
	}
	files, _ := libcni.ConfFiles(confDir, nodestate.ConfExtensions)
	var out []agentNetwork
	for _, f := range files {
		l, err := nodestate.LoadConfFile(f)
		if err != nil {
			continue
		}
		for _, p := range l.Plugins {
			var conf struct {
				IPAM struct {
					Type string `json:"type"`
				} `json:"ipam"`
			}
			if json.Unmarshal(p.Bytes, &conf) != nil || conf.IPAM.Type == "" {
				continue
			}
			if sock, ok := d.roles.AgentSocket(conf.IPAM.Type, p.Bytes); ok {
				out = append(out, agentNetwork{name: l.Name, ipam: conf.IPAM.Type, socket: sock})
			}
		}
	}
	return out
}
