//go:build !nokube

package policy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cnibox/cnibox/agent/loggedflows"
	"github.com/cnibox/cnibox/internal/flowlog"
	"github.com/cnibox/cnibox/internal/svcmodel"
)

// TestFlowLogRecordService: the record of a connection the services table
// DNATed names the Service it went to (docs/flowlog.md's "service"): the
// frontend from the event, the Service port from the agent's namer; a
// frontend the namer does not know keeps its address and port; a
// connection with no frontend has no service.
func TestFlowLogRecordService(t *testing.T) {
	e := scaleEngine(testCluster(nil, nil))
	fe := netip.MustParseAddrPort("10.96.0.10:8080")
	web := svcmodel.PortName{Namespace: "x", Name: "web", Port: "http"}
	snap := &svcmodel.Snapshot{Ports: []svcmodel.ServicePort{{Name: web, Family: svcmodel.IPv4, Protocol: svcmodel.TCP,
		Frontends: []svcmodel.Frontend{{Kind: svcmodel.ClusterIP, Addr: fe.Addr(), Family: svcmodel.IPv4, Port: fe.Port()}}}}}
	namer := func(proto uint8, frontend netip.AddrPort) (svcmodel.PortName, bool) {
		if proto != 6 {
			return svcmodel.PortName{}, false
		}
		return snap.FrontendOf(svcmodel.TCP, frontend)
	}
	ev := loggedflows.Event{Time: time.Now(), Allow: true, Counter: "dflt-in", Proto: 6,
		Src: netip.AddrPortFrom(ip("y", "b"), 40000), Dst: netip.AddrPortFrom(ip("x", "a"), 80), Frontend: fe}
	record := func(ev loggedflows.Event, n ServiceNamer) flowlog.Record {
		s := e.snapshot(ev.Src.Addr(), ev.Dst.Addr())
		s.serviceOf = n
		return s.record(ev)
	}
	if got, want := record(ev, namer).Service, (flowlog.Service{IP: fe.Addr(), Port: 8080, Namespace: "x", Name: "web", PortName: "http"}); got == nil || *got != want {
		t.Errorf("service %+v, want %+v", got, want)
	}
	other := ev
	other.Frontend = netip.MustParseAddrPort("10.96.0.99:80")
	if got, want := record(other, namer).Service, (flowlog.Service{IP: other.Frontend.Addr(), Port: 80}); got == nil || *got != want {
		t.Errorf("an unknown frontend: service %+v, want %+v", got, want)
	}
	if got := record(ev, nil).Service; got == nil || *got != (flowlog.Service{IP: fe.Addr(), Port: 8080}) {
		t.Errorf("without a namer: service %+v, want the frontend only", got)
	}
	straight := ev
	straight.Frontend = netip.AddrPort{}
	if got := record(straight, namer).Service; got != nil {
		t.Errorf("a connection no DNAT changed: service %+v, want none", got)
	}
}
