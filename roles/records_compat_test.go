package roles_test

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cnibox/cnibox/internal/delegaterec"
	"github.com/cnibox/cnibox/roles"
	"github.com/cnibox/cnibox/roles/bandwidth"
	"github.com/cnibox/cnibox/roles/cloudipam"
	"github.com/cnibox/cnibox/roles/dhcp/lease"
	"github.com/cnibox/cnibox/roles/portmap"
	"github.com/cnibox/cnibox/roles/tuning"
	"github.com/cnibox/cnibox/store"
)

// TestRecordsOfOldStore: a node upgraded in place reads the records the
// store held before the roles owned their kinds. testdata/store-03d73d5 is
// a store that cnibox at 03d73d5 wrote (store.Store's Tuning, Bandwidth,
// UpdatePortMaps, Delegates, DHCP and IPAMTx.PutCloudCache, one record each, by
// mkold.go.txt): each role's kind reads its record from the same bucket
// and key, and the buckets the roles declare for gc (cniplug.Leftovers)
// are those the records are in.
func TestRecordsOfOldStore(t *testing.T) {
	st := openCopy(t, "testdata/store-03d73d5")
	const network, cid, ifname = "net", "c1", "eth0"

	tr, ok, err := tuning.Records.In(st).Get(network, cid, ifname)
	if err != nil || !ok || tr.MTU != 1400 || tr.Promisc == nil || !*tr.Promisc || len(tr.Sysctls) != 1 ||
		tr.Sysctls[0].Key != "net/ipv4/conf/eth0/rp_filter" || tr.Netns != "/run/netns/p1" || tr.BootID != "boot-old" || tr.Created.IsZero() {
		t.Errorf("tuning record = %+v, %v, %v", tr, ok, err)
	}
	br, ok, err := bandwidth.Records.In(st).Get(network, cid, ifname)
	if err != nil || !ok || br.Ifb != "cbw0123456789ab" || br.HostIf != "cbx0123456789ab" || br.EgressRate != 1000000 || br.EgressBurst != 8000 {
		t.Errorf("bandwidth record = %+v, %v, %v", br, ok, err)
	}
	var pr portmap.Record
	err = portmap.Records.View(st, func(tx store.KindTx[portmap.Record]) (err error) {
		pr, ok, err = tx.Get(network, cid, ifname)
		return err
	})
	if err != nil || !ok || pr.Pod != "default/web" || len(pr.Mappings) != 1 || pr.Mappings[0].HostPort != 8080 ||
		pr.Mappings[0].PodIP != netip.MustParseAddr("10.88.0.2") || pr.Mappings[0].Protocol != "tcp" || len(pr.Masq) != 1 {
		t.Errorf("portmap record = %+v, %v, %v", pr, ok, err)
	}
	dr, ok, err := delegaterec.Records.In(st).Get("flannelnet", cid, ifname)
	if err != nil || !ok || dr.Plugin != "flannel" || len(dr.Delegates) != 1 || dr.Delegates[0].Type != "bridge" ||
		string(dr.Delegates[0].Conf) != `{"type":"bridge","name":"flannelnet"}` || len(dr.Delegates[0].Result) == 0 {
		t.Errorf("delegate record = %+v, %v, %v", dr, ok, err)
	}
	lr, ok, err := lease.Records.In(st).Get("lan", cid, "net1")
	if err != nil || !ok || lr.State != lease.Bound || lr.Address != "192.0.2.10/24" || lr.Server != "192.0.2.1" ||
		len(lr.Provide) != 1 || lr.Provide[0].Value != "web" || !slices.Equal(lr.Ack, []byte{1, 2, 3}) || !slices.Equal(lr.Request, []int{3, 6}) {
		t.Errorf("dhcp lease = %+v, %v, %v", lr, ok, err)
	}

	var cc cloudipam.CloudCache
	err = st.ViewIPAM("azure", func(tx *store.IPAMTx) error {
		cc, ok = cloudipam.CacheOf(tx)
		return nil
	})
	if err != nil || !ok || cc.Provider != "azure" || len(cc.NICs) != 1 || cc.NICs[0].MAC != "000d3a51c490" ||
		!slices.Equal(cc.NICs[0].Addrs, []netip.Addr{netip.MustParseAddr("10.240.0.36")}) {
		t.Errorf("cloud cache = %+v, %v, %v", cc, ok, err)
	}

	// gc reads every kind the roles declare, without their types.
	want := map[string]string{"portmaps": network, "tuning": network, "bandwidth": network, "delegates": "flannelnet"}
	for _, l := range roles.Registry().Leftovers() {
		for _, k := range l.Records {
			raw, err := st.RawRecords(k.Bucket)
			if err != nil || len(raw) != 1 || raw[0].Network != want[k.Bucket] || raw[0].ContainerID != cid || raw[0].BootID != "boot-old" {
				t.Errorf("RawRecords(%s) = %+v, %v; want the one record of %s", k.Bucket, raw, err, want[k.Bucket])
			}
			delete(want, k.Bucket)
		}
	}
	if len(want) != 0 {
		t.Errorf("no role declares the buckets %v for gc", want)
	}
	if rep, err := st.Check(); err != nil || len(rep.Problems) != 0 {
		t.Errorf("store check: %+v, %v", rep.Problems, err)
	}
}

// openCopy opens a copy of the store in dir (the test may change it).
func openCopy(t *testing.T, dir string) *store.Store {
	t.Helper()
	tmp := t.TempDir()
	src, err := os.Open(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(tmp, store.FileName), os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = io.Copy(dst, src)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(tmp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
