package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// selectEndpoints returns the store's endpoint records matching the
// --network, --pod and --container flags.
func selectEndpoints(c *ucli.Context) ([]store.Endpoint, error) {
	var eps []store.Endpoint
	err := readStore(c, func(st *store.Store) error {
		var err error
		eps, err = st.Endpoints(c.String("network"))
		return err
	})
	if err != nil {
		return nil, err
	}
	pod, cid := c.String("pod"), c.String("container")
	keep := eps[:0]
	for _, ep := range eps {
		if pod != "" && !podMatches(ep, pod) {
			continue
		}
		if cid != "" && !strings.HasPrefix(ep.ContainerID, cid) {
			continue
		}
		keep = append(keep, ep)
	}
	return keep, nil
}

// podMatches reports whether ep is pod's: NAMESPACE/NAME, or NAME in any
// namespace (as `cnibox flows --pod` takes it).
func podMatches(ep store.Endpoint, pod string) bool {
	if strings.Contains(pod, "/") {
		return podName(ep) == pod
	}
	return ep.PodName == pod
}

func (o Options) inspectEndpoints(c *ucli.Context) error {
	eps, err := selectEndpoints(c)
	if err != nil {
		return err
	}
	if len(eps) == 0 && (c.String("pod") != "" || c.String("container") != "") {
		fmt.Fprintf(c.App.ErrWriter, "cnibox: no endpoint record matches --pod %q --container %q --network %q "+
			"(--pod takes NAMESPACE/NAME, or NAME in any namespace; `cnibox inspect endpoints` lists them all)\n",
			c.String("pod"), c.String("container"), c.String("network"))
	}
	text := printEndpoints
	if c.Bool("detail") {
		text = func(w io.Writer, eps []store.Endpoint) error { return printEndpointDetails(w, o.Registry, eps) }
	}
	return show(c, nonNil(eps), text, nil)
}

// printEndpoints prints one row per endpoint.
func printEndpoints(w io.Writer, eps []store.Endpoint) error {
	tw := newTable(w)
	row(tw, "NETWORK", "CONTAINER", "IFNAME", "POD", "IPS", "HOST VETH", "MAC", "NETNS", "CREATED")
	for _, ep := range eps {
		row(tw, ep.Network, short(ep.ContainerID), ep.IfName, orDash(podName(ep)), orDash(joinStrings(ep.IPs)),
			orDash(ep.HostVeth), orDash(ep.MAC), orDash(ep.Netns), ep.Created.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// printEndpointDetails prints one block per endpoint, with its live state.
func printEndpointDetails(w io.Writer, roles *cniplug.Registry, eps []store.Endpoint) error {
	return onHost(func(host *netops.Handle) error {
		for i, ep := range eps {
			if i > 0 {
				fmt.Fprintln(w)
			}
			printEndpointDetail(w, host, roles, ep)
		}
		if len(eps) == 0 {
			fmt.Fprintln(w, "no endpoints")
		}
		return nil
	})
}

// printEndpointDetail prints every field of ep (and the line its role's
// Describe adds on its layout) and whether its netns and host veth are
// there now.
func printEndpointDetail(w io.Writer, host *netops.Handle, roles *cniplug.Registry, ep store.Endpoint) {
	tw := newTable(w)
	fmt.Fprintf(tw, "endpoint %s/%s/%s\n", ep.Network, ep.ContainerID, ep.IfName)
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	pod := podName(ep)
	if ep.PodUID != "" {
		pod += " (uid " + ep.PodUID + ")"
	}
	field("pod", pod)
	field("plugin", ep.Plugin)
	field("mode", describeEndpoint(roles, ep))
	field("netns", ep.Netns)
	field("bridge", ep.Bridge)
	field("host veth", ep.HostVeth)
	field("mac", ep.MAC)
	field("ips", strings.ReplaceAll(joinStrings(ep.IPs), ",", ", "))
	field("gateways", strings.ReplaceAll(joinStrings(ep.Gateways), ",", ", "))
	var routes []string
	for _, r := range ep.Routes {
		s := r.Dst.String()
		if r.GW.IsValid() {
			s += " via " + r.GW.String()
		}
		routes = append(routes, s)
	}
	field("routes", strings.Join(routes, ", "))
	var dns []string
	if len(ep.DNS.Nameservers) > 0 {
		dns = append(dns, "nameservers "+strings.Join(ep.DNS.Nameservers, " "))
	}
	if ep.DNS.Domain != "" {
		dns = append(dns, "domain "+ep.DNS.Domain)
	}
	if len(ep.DNS.Search) > 0 {
		dns = append(dns, "search "+strings.Join(ep.DNS.Search, " "))
	}
	if len(ep.DNS.Options) > 0 {
		dns = append(dns, "options "+strings.Join(ep.DNS.Options, " "))
	}
	field("dns", strings.Join(dns, "; "))
	boot := "this boot"
	if ep.BootID != "" && ep.BootID != store.BootID() {
		boot = "an earlier boot (" + ep.BootID + ")"
	}
	field("created", ep.Created.Local().Format("2006-01-02 15:04:05 MST")+", "+boot)
	var extra []string
	for _, k := range slices.Sorted(maps.Keys(ep.Extra)) {
		extra = append(extra, k+"="+ep.Extra[k])
	}
	field("extra", strings.Join(extra, " "))
	field("now", liveState(host, ep))
	tw.Flush()
}

// liveState says whether the endpoint's netns and host veth exist now.
func liveState(host *netops.Handle, ep store.Endpoint) string {
	var parts []string
	if ep.Netns != "" {
		ok, err := netops.NetnsExists(ep.Netns)
		switch {
		case err != nil:
			parts = append(parts, "netns unknown ("+err.Error()+")")
		case ok:
			parts = append(parts, "netns present")
		default:
			parts = append(parts, "netns GONE (cnibox gc removes this record)")
		}
	}
	if ep.HostVeth != "" {
		l, err := host.LinkByName(ep.HostVeth)
		switch {
		case err != nil:
			parts = append(parts, "host veth MISSING")
		case !l.Up:
			parts = append(parts, "host veth DOWN")
		default:
			parts = append(parts, "host veth up")
		}
	}
	return strings.Join(parts, ", ")
}
