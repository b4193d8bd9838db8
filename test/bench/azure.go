package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/netops"
)

// The azure case: azure-vnet's two modes on one simulated Azure node, the
// AKS conflists each mode ships with (Azure's cni/azure-linux.conflist for
// transparent mode, the pre-2020 one for bridge mode), sequential ADD and
// DEL of n pods per round and the TCP round trip between two of them,
// rounds interleaved transparent, bridge, transparent, ... There is no
// reference side: Azure's own binaries are not on this machine.

// azureConflists are the two modes' conflists (cnibox's store keeps the
// records; the IPAM is the host agent's secondary IPs).
var azureConflists = map[string]string{
	"transparent": `{"cniVersion":"0.3.0","name":"azure","plugins":[{"type":"azure-vnet","mode":"transparent","ipsToRouteViaHost":["169.254.20.10"],"ipam":{"type":"azure-vnet-ipam"}},{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`,
	"bridge":      `{"cniVersion":"0.3.0","name":"azure","plugins":[{"type":"azure-vnet","mode":"bridge","bridge":"azure0","ipam":{"type":"azure-vnet-ipam"}},{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`,
}

// The simulated node: its NIC (a veth to a namespace standing for the
// fabric), the NIC's MAC and primary address, the fabric's gateway.
const (
	azNIC    = "cbench-az0"
	azMAC    = "00:0d:3a:51:c4:90"
	azRTTs   = 2000 // round trips per pod-to-pod measurement
	azSubnet = "10.240.0.0/16"
)

var (
	azNode    = netip.MustParsePrefix("10.240.0.4/16")
	azGateway = netip.MustParsePrefix("10.240.0.1/16")
)

// azureSamples are one mode's measurements.
type azureSamples struct{ add, del, rtt *sample }

// runAzure runs the azure case and prints its table.
func (b *bench) runAzure() {
	fabric, stopAgent, err := b.azureNode()
	if err != nil {
		b.fail("azure: set up the simulated node: %v", err)
		return
	}
	defer stopAgent()
	defer b.deleteNS(fabric)
	s := b.sides[0]
	res := map[string]*azureSamples{}
	modes := []string{"transparent", "bridge"}
	for r := 0; r < b.o.rounds && !b.stopping.Load(); r++ {
		for _, mode := range modes {
			if res[mode] == nil {
				res[mode] = &azureSamples{&sample{}, &sample{}, &sample{}}
			}
			if err := b.azureRound(s, mode, res[mode]); err != nil {
				b.fail("azure %s round %d: %v", mode, r+1, err)
				return
			}
			if err := azureResetNode(); err != nil {
				b.fail("azure: reset the node after %s mode: %v", mode, err)
				return
			}
		}
	}
	var rows []row
	for _, mode := range modes {
		sm := res[mode]
		if sm == nil {
			continue
		}
		add, del, rtt := orZero(summarise(sm.add)), orZero(summarise(sm.del)), orZero(summarise(sm.rtt))
		rows = append(rows, row{mode, fmtMs(add.P50), fmtMs(add.P90), fmtMs(del.P50), fmtMs(del.P90), fmt.Sprintf("%.1f", rtt.P50*1000), fmt.Sprintf("%.1f", rtt.P90*1000), fmt.Sprint(add.N)})
		b.emit(jsonLine{Kind: "azure", Group: "azure-vnet", Mode: mode, Op: "ADD", Ours: add})
		b.emit(jsonLine{Kind: "azure", Group: "azure-vnet", Mode: mode, Op: "DEL", Ours: del})
		b.emit(jsonLine{Kind: "azure", Group: "azure-vnet", Mode: mode, Op: "pod-to-pod TCP round trip", Ours: rtt})
	}
	printTable(fmt.Sprintf("azure-vnet on one node: transparent vs bridge mode (AKS conflists, %d pods x %d rounds, sequential; round trip: %d x 1 byte between two pods)", b.o.n, b.o.rounds, azRTTs),
		row{"mode", "ADD p50 ms", "ADD p90 ms", "DEL p50 ms", "DEL p90 ms", "RTT p50 us", "RTT p90 us", "pods"}, rows)
}

// azureRound adds n pods in mode (each ADD timed), measures the round trip
// between the first two, deletes them all (each DEL timed) and checks that
// nothing is left.
func (b *bench) azureRound(s *side, mode string, sm *azureSamples) error {
	l, err := libcni.ConfListFromBytes([]byte(azureConflists[mode]))
	if err != nil {
		return err
	}
	type pod struct {
		ns, path string
		rt       *libcni.RuntimeConf
		ip       netip.Addr
	}
	var pods []*pod
	defer func() {
		for _, p := range pods {
			b.deleteNS(p.ns)
		}
	}()
	for i := 0; i < b.o.n && !b.stopping.Load(); i++ {
		ns, path, err := b.newNS()
		if err != nil {
			return err
		}
		p := &pod{ns: ns, path: path, rt: &libcni.RuntimeConf{ContainerID: containerID("azure", mode, ns), NetNS: path, IfName: "eth0"}}
		pods = append(pods, p)
		ctx, cancel := opCtx()
		start := time.Now()
		r, err := s.cni.AddNetworkList(ctx, l, p.rt)
		sm.add.lat = append(sm.add.lat, time.Since(start))
		cancel()
		if err != nil {
			return fmt.Errorf("ADD: %w", err)
		}
		cr, err := current.NewResultFromResult(r)
		if err != nil || len(cr.IPs) == 0 {
			return fmt.Errorf("ADD result %v: %v", r, err)
		}
		p.ip = netip.MustParseAddr(cr.IPs[0].Address.IP.String())
	}
	if len(pods) >= 2 {
		if err := azureRTT(pods[0].path, pods[1].path, pods[1].ip, sm.rtt); err != nil {
			return fmt.Errorf("pod-to-pod: %w", err)
		}
	}
	for _, p := range pods {
		ctx, cancel := opCtx()
		start := time.Now()
		err := s.cni.DelNetworkList(ctx, l, p.rt)
		sm.del.lat = append(sm.del.lat, time.Since(start))
		cancel()
		if err != nil {
			return fmt.Errorf("DEL: %w", err)
		}
	}
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	links, err := h.Links()
	if err != nil {
		return err
	}
	for _, lk := range links {
		if strings.HasPrefix(lk.Name, "azv") {
			return fmt.Errorf("host veth %s left after DEL", lk.Name)
		}
	}
	return nil
}

// azureRTT measures azRTTs one-byte TCP round trips from the pod at from to
// a server in the pod at to (address ip), each a sample.
func azureRTT(from, to string, ip netip.Addr, rec *sample) error {
	var ln net.Listener
	if err := netops.InNetns(to, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		return err
	}); err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	var c net.Conn
	if err := netops.InNetns(from, func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	buf := []byte{0}
	for i := 0; i < azRTTs; i++ {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		rec.lat = append(rec.lat, time.Since(start))
	}
	return nil
}

// azureNode turns the bench's node namespace into an Azure VM: the NIC
// with the host agent's MAC and the primary address, a default route to
// the fabric's gateway, and the host agent answering on loopback with one
// secondary IP per pod of a round. It returns the fabric namespace and a
// function that stops the host agent.
func (b *bench) azureNode() (string, func(), error) {
	fabric, fabricPath, err := b.newNS()
	if err != nil {
		return "", nil, err
	}
	h, err := netops.Open("")
	if err != nil {
		return fabric, nil, err
	}
	defer h.Close()
	fh, err := netops.Open(fabricPath)
	if err != nil {
		return fabric, nil, err
	}
	defer fh.Close()
	mac, _ := net.ParseMAC(azMAC)
	if _, _, err := h.EnsureVeth(netops.VethOpts{HostName: azNIC, PeerName: "eth0", Peer: fh, HostMAC: mac}); err != nil {
		return fabric, nil, err
	}
	if err := fh.EnsureAddr("eth0", azGateway, netops.AddrOpts{NoDAD: true}); err != nil {
		return fabric, nil, err
	}
	if err := azureResetNode(); err != nil {
		return fabric, nil, err
	}
	var xml strings.Builder
	fmt.Fprintf(&xml, `<Interfaces><Interface MacAddress="%s" IsPrimary="true"><IPSubnet Prefix="%s">`, strings.ToUpper(strings.ReplaceAll(azMAC, ":", "")), azSubnet)
	fmt.Fprintf(&xml, `<IPAddress Address="%s" IsPrimary="true"/>`, azNode.Addr())
	ip := azNode.Addr()
	for i := 0; i < b.o.n; i++ {
		ip = ip.Next()
		fmt.Fprintf(&xml, `<IPAddress Address="%s" IsPrimary="false"/>`, ip)
	}
	xml.WriteString(`</IPSubnet></Interface></Interfaces>`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fabric, nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, xml.String()) })}
	go srv.Serve(ln)
	os.Setenv("CNIBOX_CLOUD_ENDPOINT", "http://"+ln.Addr().String()+"/machine/plugins?comp=nmagent&type=getinterfaceinfov1")
	stop := func() {
		srv.Shutdown(context.Background())
		if h, err := netops.Open(""); err == nil {
			h.DeleteLink("azure0")
			h.DeleteLink(azNIC)
			h.NFT().DeleteFabric()
			h.Close()
		}
	}
	return fabric, stop, nil
}

// azureResetNode puts the node back as before any mode ran: bridge mode
// moved the NIC onto azure0 with its address and default route; the NIC
// gets them back.
func azureResetNode() error {
	h, err := netops.Open("")
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.DeleteLink("azure0"); err != nil {
		return err
	}
	if err := h.NFT().DeleteFabric(); err != nil {
		return err
	}
	if err := h.SetLinkUp(azNIC); err != nil {
		return err
	}
	if err := h.EnsureAddr(azNIC, azNode, netops.AddrOpts{NoDAD: true}); err != nil {
		return err
	}
	return h.EnsureRoute(netops.Route{GW: azGateway.Addr(), Dev: azNIC})
}
