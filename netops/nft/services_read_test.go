package nft_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/internal/svcmodel"
	"github.com/cnibox/cnibox/netops/internal/labtest"
	"github.com/cnibox/cnibox/netops/nft"
)

// TestServicesRead: the services table written from a snapshot with every
// kind of ServicePort reads back as the snapshot's frontends, each with
// the endpoints its traffic goes to (the Local ones where a policy is
// Local), reject or drop when it has none, affinity, source ranges and
// where it masquerades; after an Apply that removes a Service and an
// endpoint, the read follows; without the table it is nil.
func TestServicesRead(t *testing.T) {
	labtest.OnNFT(t, "svcread", func(t *testing.T, k *labtest.NFT) {
		v, err := k.ReadServices()
		must(t, err)
		if v != nil {
			t.Fatalf("no table: read %+v, want nil", v)
		}
		snap := nft.TraceSnap()
		s := nft.NewServices(k.Handle, nft.ServicesOptions{})
		must(t, s.Apply(snap))
		checkRead(t, k.Handle, snap)

		next := *snap
		next.Ports = slices.Clone(snap.Ports[1:])
		next.Ports[0].ClusterEndpoints = next.Ports[0].ClusterEndpoints[1:]
		must(t, s.Apply(&next))
		checkRead(t, k.Handle, &next)

		must(t, s.Delete())
		if v, err := k.ReadServices(); err != nil || v != nil {
			t.Errorf("after Delete: %+v, %v; want nil", v, err)
		}
	})
}

func checkRead(t *testing.T, h *nft.Handle, snap *svcmodel.Snapshot) {
	t.Helper()
	v, err := h.ReadServices()
	must(t, err)
	if v == nil {
		t.Fatal("ReadServices: nil with the table there")
	}
	want := wantFrontends(snap)
	got := map[string]nft.ServiceFrontend{}
	for _, fe := range v.Frontends {
		got[feKey(fe)] = fe
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("frontend %s not read back", k)
			continue
		}
		if !slices.Equal(g.Endpoints, w.Endpoints) || g.NoEndpoints != w.NoEndpoints || g.Affinity != w.Affinity ||
			g.SourceRanges != w.SourceRanges || g.Masquerade != w.Masquerade {
			t.Errorf("frontend %s read as\n%+v, want\n%+v", k, g, w)
		}
		if len(g.Endpoints) > 1 && g.Slots < 7*len(g.Endpoints) {
			t.Errorf("frontend %s: %d slots for %d endpoints", k, g.Slots, len(g.Endpoints))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("frontend %s read, not in the snapshot", k)
		}
	}
	if !slices.EqualFunc(sortedAddrs(v.NodePortAddrs), sortedAddrs(snap.NodePortAddrs), func(a, b netip.Addr) bool { return a == b }) {
		t.Errorf("NodePort addresses %v, want %v", v.NodePortAddrs, snap.NodePortAddrs)
	}
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	return slices.SortedFunc(slices.Values(a), netip.Addr.Compare)
}

func feKey(fe nft.ServiceFrontend) string {
	return fe.Service + " " + fe.Kind + " " + fe.Protocol + " " + netip.AddrPortFrom(fe.Addr, fe.Port).String() + " v" + string(rune('0'+fe.Family))
}

// wantFrontends is what the table should serve for snap, by feKey.
func wantFrontends(snap *svcmodel.Snapshot) map[string]nft.ServiceFrontend {
	cidr := map[svcmodel.Family]bool{}
	for _, p := range snap.ClusterCIDRs {
		cidr[svcmodel.FamilyOf(p.Addr())] = true
	}
	out := map[string]nft.ServiceFrontend{}
	for _, sp := range snap.Ports {
		for _, fe := range sp.Frontends {
			w := nft.ServiceFrontend{Service: sp.Name.String(), Protocol: string(sp.Protocol), Family: int(sp.Family),
				Addr: fe.Addr, Port: fe.Port, Endpoints: []netip.AddrPort{}}
			eps := sp.ClusterEndpoints
			switch fe.Kind {
			case svcmodel.ClusterIP:
				w.Kind = "ClusterIP"
				if sp.InternalLocal {
					eps = sp.LocalEndpoints
				}
				if cidr[sp.Family] {
					w.Masquerade = "from outside the cluster"
				}
			default:
				w.Kind = "External"
				if fe.Kind == svcmodel.NodePort {
					w.Kind = "NodePort"
				} else if fe.Kind == svcmodel.LoadBalancer && len(sp.SourceRanges) > 0 {
					w.Kind, w.SourceRanges = "LoadBalancer", true
				}
				w.Masquerade = "all"
				if sp.ExternalLocal {
					eps, w.Masquerade = sp.LocalEndpoints, "from the node"
				}
			}
			for _, e := range eps {
				w.Endpoints = append(w.Endpoints, netip.AddrPortFrom(e.Addr, e.Port))
			}
			slices.SortFunc(w.Endpoints, netip.AddrPort.Compare)
			switch {
			case len(eps) == 0 && sp.HasEndpoints:
				w.NoEndpoints = "drop"
			case len(eps) == 0:
				w.NoEndpoints = "reject"
			default:
				w.Affinity = sp.AffinityTimeout
			}
			out[feKey(w)] = w
		}
	}
	return out
}
