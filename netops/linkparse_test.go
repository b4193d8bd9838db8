package netops

import (
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// TestParseLink decodes RTM_NEWLINK messages built here: the attributes
// Link reports, including a bridge's vlan_filtering, a bridge port's hairpin
// mode and a veth's peer, which only some kernels let the other tests make.
func TestParseLink(t *testing.T) {
	msg := func(index int32, attrs ...*nl.RtAttr) []byte {
		m := nl.NewIfInfomsg(unix.AF_UNSPEC)
		m.Index, m.Flags = index, unix.IFF_UP
		b := m.Serialize()
		for _, a := range attrs {
			b = append(b, a.Serialize()...)
		}
		return b
	}
	info := func(kind string, data ...*nl.RtAttr) *nl.RtAttr {
		li := nl.NewRtAttr(unix.IFLA_LINKINFO|unix.NLA_F_NESTED, nil)
		li.AddRtAttr(nl.IFLA_INFO_KIND, []byte(kind))
		if len(data) > 0 {
			d := li.AddRtAttr(nl.IFLA_INFO_DATA|unix.NLA_F_NESTED, nil)
			for _, a := range data {
				d.AddChild(a)
			}
		}
		return li
	}
	port := info("veth")
	port.AddRtAttr(nl.IFLA_INFO_SLAVE_KIND, []byte("bridge"))
	sd := port.AddRtAttr(nl.IFLA_INFO_SLAVE_DATA, nil)
	sd.AddRtAttr(nl.IFLA_BRPORT_MODE, []byte{1})
	for _, tc := range []struct {
		name string
		m    []byte
		want Link
	}{
		{"bridge", msg(3, nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated("br0")), nl.NewRtAttr(unix.IFLA_MTU, u32(1400)),
			info("bridge", nl.NewRtAttr(nl.IFLA_BR_VLAN_FILTERING, []byte{1}))),
			Link{Name: "br0", Index: 3, MTU: 1400, Kind: "bridge", Up: true, VlanFiltering: true}},
		{"bridge off", msg(3, info("bridge", nl.NewRtAttr(nl.IFLA_BR_VLAN_FILTERING, []byte{0}))),
			Link{Index: 3, Kind: "bridge", Up: true}},
		{"port", msg(9, nl.NewRtAttr(unix.IFLA_LINK, u32(4)), nl.NewRtAttr(unix.IFLA_MASTER, u32(3)), port),
			Link{Index: 9, Kind: "veth", Up: true, PeerIndex: 4, MasterIndex: 3, Hairpin: true}},
		{"no link info", msg(1, nl.NewRtAttr(unix.IFLA_LINK, u32(4)), nl.NewRtAttr(unix.IFLA_MTU, []byte{1})),
			Link{Index: 1, Up: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLink(tc.m)
			if err != nil || got.Name != tc.want.Name || got.Index != tc.want.Index || got.MTU != tc.want.MTU ||
				got.Kind != tc.want.Kind || got.Up != tc.want.Up || got.VlanFiltering != tc.want.VlanFiltering ||
				got.PeerIndex != tc.want.PeerIndex || got.MasterIndex != tc.want.MasterIndex || got.Hairpin != tc.want.Hairpin {
				t.Errorf("parseLink = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
