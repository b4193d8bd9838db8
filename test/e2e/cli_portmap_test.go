package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/netops/nft"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/bridge"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/store"
)

// TestCLIDoctorPortmap: on a healthy pod with a host port, doctor passes and
// lists a line per port mapping, masquerade entry and route_localnet; after
// route_localnet is turned off, and after the pod's IPv4 mapping element is
// deleted by hand, doctor exits 1 and its first failing line names the
// broken thing, with a fix.
func TestCLIDoctorPortmap(t *testing.T) {
	e := newEnv(t)
	pmNoDAD(t)
	b, err := os.ReadFile(repoFile("examples", "85-portmap.conflist"))
	must(t, err)
	conf := e.confDir(map[string]string{"85-portmap.conflist": string(b)})
	l := loadList(t, filepath.Join(conf, "85-portmap.conflist"))
	doctor := func(want int) []doctorResult {
		t.Helper()
		var rs []doctorResult
		e.cliJSON(&rs, want, "doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--pod", "default/web")
		return rs
	}
	const port = 18580
	p := e.newPod("web")
	p.rt.CapabilityArgs = pmCapability(port)
	res := e.add(l, p)
	defer e.del(l, p)
	defer e.del(l, p)
	ip4 := podIP(t, res, true)

	t.Run("healthy", func(t *testing.T) {
		rs := doctor(0)
		var pm, localnet []string
		for _, r := range rs {
			switch {
			case r.Status == "fail":
				t.Errorf("failed on a healthy pod: %+v", r)
			case r.Check == "portmap":
				pm = append(pm, r.Detail)
			case r.Check == "route_localnet":
				localnet = append(localnet, r.Detail)
			}
		}
		// IPv4 and IPv6 mapping, two masquerade entries.
		if len(pm) != 4 || !strings.Contains(strings.Join(pm, "\n"), fmt.Sprintf(":%d/tcp -> %s", port, netip.AddrPortFrom(ip4, 80))) {
			t.Errorf("portmap lines = %q, want 4 naming *:%d/tcp -> %s:80", pm, port, ip4)
		}
		if len(localnet) != 1 || !strings.Contains(localnet[0], "net.ipv4.conf.cnibox-pm0.route_localnet = 1") {
			t.Errorf("route_localnet lines = %q, want one passing for cnibox-pm0", localnet)
		}
	})

	fails := func(t *testing.T) []doctorResult {
		t.Helper()
		var out []doctorResult
		for _, r := range doctor(1) {
			if r.Status == "fail" {
				out = append(out, r)
			}
		}
		return out
	}
	t.Run("route_localnet off", func(t *testing.T) {
		h := hostHandle(t)
		const key = "net.ipv4.conf.cnibox-pm0.route_localnet"
		must(t, h.SetSysctl(key, "0"))
		defer h.SetSysctl(key, "1")
		fs := fails(t)
		if len(fs) != 1 || fs[0].Check != "route_localnet" || !strings.Contains(fs[0].Detail, key+" is 0") || !strings.Contains(fs[0].Fix, "sysctl -w "+key+"=1") {
			t.Errorf("failures = %+v, want one route_localnet failure naming %s with the sysctl fix", fs, key)
		}
	})

	t.Run("mapping deleted", func(t *testing.T) {
		m := nft.PortMapping{Proto: nft.ProtoTCP, HostPort: port, PodIP: ip4, PodPort: 80}
		must(t, hostHandle(t).NFT().DeletePortMaps(nft.PortMaps{Owner: portmap.PortMapOwner(l.Name, p.id, "eth0"), Mappings: []nft.PortMapping{m}}))
		fs := fails(t)
		if len(fs) != 1 || fs[0].Check != "portmap" || !strings.Contains(fs[0].Detail, m.String()) ||
			!strings.Contains(fs[0].Detail, "missing from table inet cnibox-portmap") || fs[0].Fix == "" {
			t.Errorf("failures = %+v, want one portmap failure naming %s as missing, with a fix", fs, m)
		}
		out, _, code := e.cliRun("doctor", "--conf-dir", conf, "--bin-dir", e.binDir, "--cache-dir", e.cacheDir, "--pod", "default/web")
		if code != 1 || !strings.Contains(out, "FAIL  portmap") || !strings.Contains(out, m.String()) || !strings.Contains(out, "fix:") {
			t.Errorf("doctor text: exit %d, want 1 with a FAIL portmap line naming %s and a fix:\n%s", code, m, out)
		}
		// The runtime's ADD, repeated, puts it back.
		e.add(l, p)
		doctor(0)
	})
}

// TestCLIGCRecords: gc removes exactly the planted leftovers of the chained
// and meta roles (the portmap, tuning and bandwidth records of a pod whose
// netns vanished without DEL, with its port mapping elements and ifb; a
// delegate record whose netns is gone; elements nothing accounts for; an ifb
// no bandwidth record names) and
// leaves the live pod's, and an in-flight delegate record, alone; --dry-run
// removes nothing.
func TestCLIGCRecords(t *testing.T) {
	e := newEnv(t)
	l := listFromJSON(t, `{"cniVersion": "1.1.0", "name": "gcrec", "plugins": [
		{"type": "bridge", "bridge": "cnibox-gc0", "isGateway": true, "isDefaultGateway": true, "ipMasq": true,
		 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.86.0/24"}]]}},
		{"type": "tuning", "sysctl": {"net.core.somaxconn": "512"}},
		{"type": "bandwidth", "egressRate": 50000000, "egressBurst": 5000000},
		{"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}`)
	h := hostHandle(t)

	live := e.newPod("live")
	live.rt.CapabilityArgs = pmCapability(18680)
	e.add(l, live)
	defer e.del(l, live)
	defer e.del(l, live)

	gone, vanish := e.newPodOwnNS("gone")
	gone.rt.CapabilityArgs = pmCapability(18681)
	goneIP := podIP(t, e.add(l, gone), true)
	vanish()
	waitLinkGone(t, bridge.HostVethName(gone.id, "eth0"))

	// Planted: delegate records of a flannel attachment whose netns is
	// gone, and of one whose netns lives (an ADD in flight: kept).
	st, err := store.Open(e.dataDir)
	must(t, err)
	inFlight := e.newPod("in-flight")
	must(t, delegaterec.Records.In(st).Put(delegaterec.Record{Network: "flannelnet", ContainerID: "dlg-gone", IfName: "eth0",
		Netns: "/run/netns/cnibox-e2e-no-such-ns", Plugin: "flannel"}))
	must(t, delegaterec.Records.In(st).Put(delegaterec.Record{Network: "flannelnet", ContainerID: inFlight.id, IfName: "eth0",
		Netns: inFlight.netns, Plugin: "flannel"}))
	st.Close()
	// Planted: a port mapping no record, endpoint or cache entry is for.
	stray := nft.PortMapping{Proto: nft.ProtoTCP, HostPort: 18682, PodIP: netip.MustParseAddr("10.88.86.250"), PodPort: 80}
	_, err = h.NFT().EnsurePortMaps(nft.PortMaps{Owner: portmap.PortMapOwner("gcrec", "stray", "eth0"), Mappings: []nft.PortMapping{stray}})
	must(t, err)

	// Planted: an ifb named like bandwidth's that no record names.
	const strayIfb = "cbw0000000000aa"
	if _, _, err := h.EnsureIfb(strayIfb, 1500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.DeleteLink(strayIfb) })

	goneIfb := ""
	st, err = store.Open(e.dataDir)
	must(t, err)
	if r, ok, err := bandwidth.Records.In(st).Get("gcrec", gone.id, "eth0"); err != nil || !ok || r.Ifb == "" {
		t.Fatalf("bandwidth record of the gone pod: %+v, %v, %v", r, ok, err)
	} else {
		goneIfb = r.Ifb
	}
	st.Close()
	if !hasLink(t, goneIfb) {
		t.Fatalf("the gone pod's ifb %s is not on the node: nothing to plant", goneIfb)
	}

	type orphan struct {
		Kind        string   `json:"kind"`
		Network     string   `json:"network"`
		ContainerID string   `json:"containerID"`
		Addr        string   `json:"addr"`
		Ports       []string `json:"ports"`
		Ifb         string   `json:"ifb"`
		Reason      string   `json:"reason"`
		Done        bool     `json:"done"`
		Error       string   `json:"error"`
		Skipped     string   `json:"skipped"`
	}
	key := func(o orphan) string {
		switch o.Kind {
		case "reservation", "masquerade":
			return o.Kind + " " + o.Addr
		case "portmap-elements":
			return o.Kind + " " + strings.Join(o.Ports, ",")
		case "bandwidth":
			return o.Kind + " " + o.ContainerID + " " + o.Ifb
		case "ifb":
			return o.Kind + " " + o.Ifb
		}
		return o.Kind + " " + o.ContainerID
	}
	want := []string{
		"endpoint " + gone.id,
		"reservation " + goneIP.String(),
		"masquerade " + goneIP.String(),
		"portmap " + gone.id,
		"portmap-elements " + stray.String(),
		"tuning " + gone.id,
		"bandwidth " + gone.id + " " + goneIfb,
		"ifb " + strayIfb,
		"delegate dlg-gone",
	}
	gc := func(done bool, args ...string) {
		t.Helper()
		var got []orphan
		e.cliJSON(&got, 0, append([]string{"gc", "--cache-dir", e.cacheDir}, args...)...)
		var keys []string
		for _, o := range got {
			keys = append(keys, key(o))
			if o.Done != done || o.Error != "" || o.Skipped != "" || o.Reason == "" {
				t.Errorf("gc %v: %+v: want done=%v, a reason and no error", args, o, done)
			}
		}
		slices.Sort(keys)
		w := slices.Sorted(slices.Values(want))
		if !slices.Equal(keys, w) {
			t.Errorf("gc %v found\n  %s\nwant\n  %s", args, strings.Join(keys, "\n  "), strings.Join(w, "\n  "))
		}
	}
	// state is what gc may change: the records of each kind, the port
	// mapping owners and the ifbs.
	state := func() string {
		st, err := store.Open(e.dataDir)
		must(t, err)
		defer st.Close()
		var s []string
		var pms []portmap.Record
		must(t, portmap.Records.View(st, func(tx store.KindTx[portmap.Record]) error { pms, err = tx.List(""); return err }))
		for _, r := range pms {
			s = append(s, "portmap "+r.ContainerID)
		}
		tun, err := tuning.Records.In(st).List("")
		must(t, err)
		for _, r := range tun {
			s = append(s, "tuning "+r.ContainerID)
		}
		bw, err := bandwidth.Records.In(st).List("")
		must(t, err)
		for _, r := range bw {
			s = append(s, "bandwidth "+r.ContainerID)
			if hasLink(t, r.Ifb) {
				s = append(s, "ifb "+r.Ifb)
			}
		}
		dl, err := delegaterec.Records.In(st).List("")
		must(t, err)
		for _, r := range dl {
			s = append(s, "delegate "+r.ContainerID)
		}
		for _, o := range pmOwners(t) {
			s = append(s, "elements "+o)
		}
		for _, ifb := range []string{goneIfb, strayIfb} {
			if hasLink(t, ifb) {
				s = append(s, "ifb "+ifb)
			}
		}
		slices.Sort(s)
		return strings.Join(s, "\n")
	}
	before := state()
	gc(false, "--dry-run")
	if after := state(); after != before {
		t.Fatalf("gc --dry-run changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	gc(true)
	liveIfb := ""
	st, err = store.Open(e.dataDir)
	must(t, err)
	if r, ok, _ := bandwidth.Records.In(st).Get("gcrec", live.id, "eth0"); ok {
		liveIfb = r.Ifb
	}
	st.Close()
	wantState := []string{
		"portmap " + live.id, "tuning " + live.id, "bandwidth " + live.id, "ifb " + liveIfb,
		"delegate " + inFlight.id, "elements " + portmap.PortMapOwner("gcrec", live.id, "eth0"),
	}
	slices.Sort(wantState)
	if got := state(); got != strings.Join(wantState, "\n") {
		t.Errorf("after gc:\n%s\nwant:\n%s", got, strings.Join(wantState, "\n"))
	}

	want = nil
	gc(false)
	if err := e.cni.CheckNetworkList(context.Background(), l, live.rt); err != nil {
		t.Errorf("CHECK of the live pod after gc: %v", err)
	}
}
