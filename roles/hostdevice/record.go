package hostdevice

import (
	"cmp"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/roles/internal/attach"
	"github.com/cnibox/cnibox/store"
)

// The endpoint record's Extra keys: what the device was on the node (its
// MAC is the record's MAC), how the config named it, and whether it is a
// DPDK device, which never moves.
const (
	keyDevice = "device"
	keyKind   = "kind"
	keyMTU    = "mtu"
	keyUp     = "up"
	keyAddrs  = "addrs"
	keyDPDK   = "dpdk"
)

// record writes into ep what giving the device back needs and how the
// config named it (t: "pciBusID": "0000:00:05.0", ...).
func record(ep *store.Endpoint, t target, st netops.DeviceState, dpdk bool) {
	ep.Extra = map[string]string{t.field: t.value}
	if t.aux {
		ep.Extra["auxDevice"] = t.value
	}
	if dpdk {
		ep.Extra[keyDPDK] = "true"
		return
	}
	ep.MAC = st.MAC.String()
	addrs := make([]string, len(st.Addrs))
	for i, p := range st.Addrs {
		addrs[i] = p.String()
	}
	ep.Extra[keyDevice] = st.Name
	ep.Extra[keyKind] = st.Kind
	ep.Extra[keyMTU] = strconv.Itoa(st.MTU)
	ep.Extra[keyUp] = strconv.FormatBool(st.Up)
	ep.Extra[keyAddrs] = strings.Join(addrs, ",")
}

// stateOf reads back what record wrote about the device (a zero Name: a
// DPDK device, or a record without one).
func stateOf(ep store.Endpoint) netops.DeviceState {
	x := ep.Extra
	st := netops.DeviceState{Name: x[keyDevice], Kind: x[keyKind], Up: x[keyUp] == "true"}
	st.MTU, _ = strconv.Atoi(x[keyMTU])
	st.MAC, _ = net.ParseMAC(ep.MAC)
	for _, s := range strings.Split(x[keyAddrs], ",") {
		if p, err := netip.ParsePrefix(s); err == nil {
			st.Addrs = append(st.Addrs, p)
		}
	}
	return st
}

// holder returns the record of another host-device attachment that holds
// the device t names (name: its name on the node, "" when it is not there),
// reading the store the call shares when it has one (inside Reserve's
// transaction, so two ADDs cannot both take a device).
func holder(a *cniplug.Args, c *conf, t target, name string) (*store.Endpoint, error) {
	st, release, err := store.OpenShared(a.Shared, store.DirFrom(c.DataDir, a.Getenv), store.Options{Getenv: a.Getenv})
	if err != nil {
		return nil, err
	}
	defer release()
	eps, err := st.Endpoints("")
	if err != nil {
		return nil, err
	}
	for i, ep := range eps {
		if ep.Plugin != plugin || (ep.Network == a.Conf.Name && ep.ContainerID == a.ContainerID && ep.IfName == a.IfName) {
			continue
		}
		if ep.Extra[t.field] == t.value || (name != "" && ep.Extra[keyDevice] == name) || (t.field == "hwaddr" && ep.MAC == t.value) {
			return &eps[i], nil
		}
	}
	return nil, nil
}

// inUse is the error for a device that ep's attachment holds.
func inUse(t target, ep *store.Endpoint) error {
	who := "container " + ep.ContainerID
	if ep.PodName != "" {
		who = "pod " + ep.PodNamespace + "/" + ep.PodName + " (" + who + ")"
	}
	return cniplug.ConfError(t.field, "the device %q names (%s) is in use by the attachment %s of network %q on %s in %s: DEL that attachment first, or name another device",
		t.value, cmp.Or(ep.Extra[keyDevice], "a DPDK device"), ep.IfName, ep.Network, who, ep.Netns)
}

// recorded returns what the call's endpoint record says the device was;
// without a record (an attachment the reference made), the name the pod's
// CNI_IFNAME has as its alias, as the reference keeps it. A zero Name: a
// DPDK device, or nothing to give back.
func recorded(a *cniplug.Args, c *conf) (netops.DeviceState, error) {
	st, err := attach.OpenStore(a, c.DataDir)
	if err != nil {
		return netops.DeviceState{}, err
	}
	defer st.Close()
	ep, found, err := st.GetEndpoint(a.Conf.Name, a.ContainerID, a.IfName)
	if err != nil {
		return netops.DeviceState{}, cniplug.WithCode(types.ErrIOFailure, err)
	}
	if found {
		return stateOf(ep), nil
	}
	return fromAlias(a), nil
}
