package cloudipam

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
)

// localNIC is an interface of the node with an Ethernet MAC.
type localNIC struct {
	Name string
	MAC  string // normalized
	Kind string
}

// localNICs lists the node's interfaces (the namespace cnibox runs in) that
// have an Ethernet MAC.
func localNICs() ([]localNIC, error) {
	h, err := netops.Open("")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return nil, err
	}
	var out []localNIC
	for _, l := range links {
		if len(l.MAC) != 6 || l.Name == "lo" {
			continue
		}
		mac, _ := normMAC(l.MAC.String())
		if mac == "000000000000" {
			continue
		}
		out = append(out, localNIC{Name: l.Name, MAC: mac, Kind: l.Kind})
	}
	return out, nil
}

// match picks the pools of this node out of what the provider listed: the
// NICs whose MAC is one of the node's (only the "master" one when pinned),
// pools without a MAC (pool files), and only the configured subnet if any.
func match(c *config, what string, listed []nicInfo, local []localNIC) ([]CloudNIC, error) {
	// When a bridge shares its MAC with a port (azure0 takes its NIC's),
	// the port is the NIC.
	names := map[string]string{}
	bridge := map[string]bool{}
	for _, l := range local {
		if _, seen := names[l.MAC]; !seen || bridge[l.MAC] {
			names[l.MAC], bridge[l.MAC] = l.Name, l.Kind == "bridge"
		}
	}
	if c.Master != "" {
		mac := ""
		for _, l := range local {
			if l.Name == c.Master {
				mac = l.MAC
			}
		}
		if mac == "" {
			return nil, cniplug.ConfError("master", "%q is not an interface of this node with a MAC address (interfaces: %s): name the NIC pods get addresses from, or remove the field", c.Master, describeLocal(local))
		}
		names = map[string]string{mac: c.Master}
	}
	var out []CloudNIC
	for _, n := range listed {
		name, ok := names[n.MAC]
		if n.MAC != "" && !ok {
			continue
		}
		if c.Subnet.IsValid() && n.Subnet != c.Subnet {
			continue
		}
		out = append(out, CloudNIC{MAC: n.MAC, Name: name, Device: n.Device, Subnet: n.Subnet, Primary: n.Primary, Addrs: n.Secondary})
	}
	if len(out) > 0 {
		slices.SortStableFunc(out, func(a, b CloudNIC) int {
			return cmp.Or(cmp.Compare(a.Device, b.Device), strings.Compare(a.MAC, b.MAC), a.Subnet.Addr().Compare(b.Subnet.Addr()))
		})
		return out, nil
	}
	var listedDesc []string
	for _, n := range listed {
		listedDesc = append(listedDesc, fmt.Sprintf("NIC %s in %s", macString(n.MAC), n.Subnet))
	}
	if len(listedDesc) == 0 {
		listedDesc = []string{"none"}
	}
	switch {
	case c.Master != "":
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "%s does not list interface %q (MAC %s) of this node%s; it lists %s: fix \"master\" or the endpoint", what, c.Master, macString(macOf(local, c.Master)), subnetNote(c), strings.Join(listedDesc, ", "))
	default:
		return nil, cniplug.Errorf(types.ErrInvalidNetworkConfig, "none of the NICs that %s lists (%s) is an interface of this node%s (interfaces: %s): the provider describes another machine, or set \"master\" and \"subnet\" to pick the NIC", what, strings.Join(listedDesc, ", "), subnetNote(c), describeLocal(local))
	}
}

func subnetNote(c *config) string {
	if c.Subnet.IsValid() {
		return " in subnet " + c.Subnet.String()
	}
	return ""
}

func macOf(local []localNIC, name string) string {
	for _, l := range local {
		if l.Name == name {
			return l.MAC
		}
	}
	return ""
}

func describeLocal(local []localNIC) string {
	var s []string
	for _, l := range local {
		s = append(s, l.Name+" "+macString(l.MAC))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
