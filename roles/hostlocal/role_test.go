package hostlocal_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/roles/hostlocal"
	"github.com/cnibox/cnibox/store"
)

const dualStack = `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}],[{"subnet":"fd00:1::/64"}]],
	"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}`

func TestLifecycleAllVersions(t *testing.T) {
	for _, v := range cniplug.SupportedVersions {
		t.Run(v, func(t *testing.T) {
			n := newNode(t)
			c := conf(v, dualStack)
			older := v == "0.3.0" || v == "0.3.1" || v == "0.4.0"

			// ADD, and the result's shape for this version.
			out := n.Must(hostlocal.Role, "ADD", "c1", c, nil)
			r := parseResult(t, out)
			if r.CNIVersion != v {
				t.Errorf("result cniVersion %q, want %q", r.CNIVersion, v)
			}
			if got := r.Addrs(); !reflect.DeepEqual(got, []string{"10.1.0.2/24", "fd00:1::2/64"}) {
				t.Errorf("addresses %v", got)
			}
			for i, want := range []struct{ version, gw string }{{"4", "10.1.0.1"}, {"6", "fd00:1::1"}} {
				ip := r.IPs[i]
				if older && ip.Version != want.version {
					t.Errorf("ips[%d].version = %q, want %q", i, ip.Version, want.version)
				}
				if !older && ip.Version != "" {
					t.Errorf("ips[%d] has a version field at %s", i, v)
				}
				if ip.Gateway != want.gw || ip.Interface != nil {
					t.Errorf("ips[%d] = %+v", i, ip)
				}
			}
			if len(r.Routes) != 2 {
				t.Errorf("routes %+v", r.Routes)
			}
			var raw map[string]any
			json.Unmarshal(out, &raw)
			if _, ok := raw["interfaces"]; ok {
				t.Errorf("an IPAM result has interfaces: %s", out)
			}

			// ADD again (a retry) gives the same addresses.
			if got := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, nil)).Addrs(); !reflect.DeepEqual(got, r.Addrs()) {
				t.Errorf("retried ADD got %v", got)
			}

			// CHECK exists from 0.4.0 on.
			_, err := n.Call(hostlocal.Role, "CHECK", "c1", c, nil)
			if v == "0.3.0" || v == "0.3.1" {
				checkErr(t, err, types.ErrIncompatibleCNIVersion)
			} else if err != nil {
				t.Errorf("CHECK: %v", err)
			}

			// DEL twice.
			n.Must(hostlocal.Role, "DEL", "c1", c, nil)
			n.Must(hostlocal.Role, "DEL", "c1", c, env{"CNI_NETNS": ""})
			if got := n.Reserved("mynet"); len(got) != 0 {
				t.Errorf("left after DEL: %v", got)
			}
			if !older && v != "0.3.0" {
				_, err := n.Call(hostlocal.Role, "CHECK", "c1", c, nil)
				checkErr(t, err, types.ErrUnknownContainer, "c1", "holds no address", "10.1.0.1-10.1.0.254")
			}

			// GC and STATUS exist from 1.1.0 on.
			_, gcErr := n.Call(hostlocal.Role, "GC", "", conf(v, dualStack, `"cni.dev/valid-attachments":[]`), nil)
			_, stErr := n.Call(hostlocal.Role, "STATUS", "", c, nil)
			if v == "1.1.0" {
				if gcErr != nil || stErr != nil {
					t.Errorf("GC: %v; STATUS: %v", gcErr, stErr)
				}
			} else {
				checkErr(t, gcErr, types.ErrIncompatibleCNIVersion)
				checkErr(t, stErr, types.ErrIncompatibleCNIVersion)
			}
		})
	}
}

func TestDelWithoutStoreOrReservation(t *testing.T) {
	n := newNode(t)
	c := conf("1.0.0", dualStack)
	n.Must(hostlocal.Role, "DEL", "never-added", c, nil)
	if _, err := os.Stat(filepath.Join(n.Dir, store.FileName)); err == nil {
		t.Error("DEL created the store")
	}
	n.Must(hostlocal.Role, "ADD", "c1", c, nil)
	n.Must(hostlocal.Role, "DEL", "never-added", c, nil)
	if got := n.Reserved("mynet"); len(got["c1"]) != 2 {
		t.Errorf("DEL of another container released c1's addresses: %v", got)
	}
	// A rangeFromFile that is gone does not stop DEL.
	n.Must(hostlocal.Role, "DEL", "c1", conf("1.0.0", `{"rangeFromFile":"/nonexistent"}`), nil)
	if got := n.Reserved("mynet"); len(got) != 0 {
		t.Errorf("left after DEL: %v", got)
	}
	// Nor does a range ADD refuses (the file edited in place after ADD):
	// DEL releases by owner and goes on without it, twice (issue 62).
	n.Must(hostlocal.Role, "ADD", "c1", c, nil)
	bad := conf("1.0.0", `{"ranges":[[{"subnet":"x"}]]}`)
	_, err := n.Call(hostlocal.Role, "ADD", "c2", bad, nil)
	checkErr(t, err, types.ErrInvalidNetworkConfig)
	for range 2 {
		n.Must(hostlocal.Role, "DEL", "c1", bad, nil)
	}
	if got := n.Reserved("mynet"); len(got) != 0 {
		t.Errorf("left after DEL with a range ADD refuses: %v", got)
	}
}

func TestInterfacesAreSeparateAttachments(t *testing.T) {
	n := newNode(t)
	c := conf("1.0.0", `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`)
	a := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, nil)).Addrs()
	b := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, env{"CNI_IFNAME": "net1"})).Addrs()
	if reflect.DeepEqual(a, b) {
		t.Fatalf("eth0 and net1 got the same address %v", a)
	}
	n.Must(hostlocal.Role, "DEL", "c1", c, env{"CNI_IFNAME": "net1"})
	if got := n.Reserved("mynet")["c1"]; !reflect.DeepEqual(got, []string{"10.1.0.2"}) {
		t.Errorf("after DEL of net1: %v", got)
	}
}

func TestNetworksAreSeparate(t *testing.T) {
	n := newNode(t)
	ipam := `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`
	n.Must(hostlocal.Role, "ADD", "c1", conf("1.0.0", ipam), nil)
	other := `{"cniVersion":"1.0.0","name":"other","ipam":` + ipam + `}`
	if got := parseResult(t, n.Must(hostlocal.Role, "ADD", "c2", other, nil)).Addrs(); got[0] != "10.1.0.2/24" {
		t.Errorf("second network got %v", got)
	}
}

func TestGC(t *testing.T) {
	n := newNode(t)
	ipam := `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`
	for _, c := range []string{"c1", "c2", "c3"} {
		n.Must(hostlocal.Role, "ADD", c, conf("1.1.0", ipam), nil)
	}
	n.Must(hostlocal.Role, "ADD", "c1", conf("1.1.0", ipam), env{"CNI_IFNAME": "net1"})

	t.Run("missing list", func(t *testing.T) {
		_, err := n.Call(hostlocal.Role, "GC", "", conf("1.1.0", ipam), nil)
		checkErr(t, err, types.ErrInvalidNetworkConfig, "cni.dev/valid-attachments")
	})
	t.Run("keeps the valid attachments", func(t *testing.T) {
		keep := `"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c3","ifname":"eth0"}]`
		n.Must(hostlocal.Role, "GC", "", conf("1.1.0", ipam, keep), nil)
		got := n.Reserved("mynet")
		want := map[string][]string{"c1": {"10.1.0.2"}, "c3": {"10.1.0.4"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after GC: %v, want %v", got, want)
		}
	})
	t.Run("synonym key", func(t *testing.T) {
		n.Must(hostlocal.Role, "GC", "", conf("1.1.0", ipam, `"cni.dev/attachments":[{"containerID":"c3","ifname":"eth0"}]`), nil)
		if got := n.Reserved("mynet"); !reflect.DeepEqual(got, map[string][]string{"c3": {"10.1.0.4"}}) {
			t.Errorf("after GC: %v", got)
		}
	})
	t.Run("empty list releases all", func(t *testing.T) {
		n.Must(hostlocal.Role, "GC", "", conf("1.1.0", ipam, `"cni.dev/valid-attachments":[]`), nil)
		if got := n.Reserved("mynet"); len(got) != 0 {
			t.Errorf("after GC: %v", got)
		}
	})
	t.Run("no store", func(t *testing.T) {
		m := newNode(t)
		m.Must(hostlocal.Role, "GC", "", conf("1.1.0", ipam, `"cni.dev/valid-attachments":[]`), nil)
	})
}

func TestStatus(t *testing.T) {
	n := newNode(t)
	ipam := `{"ranges":[[{"subnet":"10.1.0.0/30"}]]}` // one usable address
	c := conf("1.1.0", ipam)
	n.Must(hostlocal.Role, "STATUS", "", c, nil) // no store yet
	n.Must(hostlocal.Role, "ADD", "c1", c, nil)
	_, err := n.Call(hostlocal.Role, "STATUS", "", c, nil)
	checkErr(t, err, cniplug.CodeNotReady, `network "mynet"`, "10.1.0.1-10.1.0.2")
	_, err = n.Call(hostlocal.Role, "ADD", "c2", c, nil)
	checkErr(t, err, cniplug.CodePoolExhausted, `network "mynet"`, "(1 of 1 in use)")
	n.Must(hostlocal.Role, "DEL", "c1", c, nil)
	n.Must(hostlocal.Role, "STATUS", "", c, nil)

	t.Run("store unusable", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o600)
		if err := os.WriteFile(filepath.Join(n.Dir, store.FileName), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := n.Call(hostlocal.Role, "STATUS", "", c, nil)
		checkErr(t, err, cniplug.CodeNotReady, `network "mynet"`, "corrupt")
		_, err = n.Call(hostlocal.Role, "ADD", "c1", c, nil)
		checkErr(t, err, types.ErrIOFailure, "corrupt", store.FileName)
	})
	t.Run("config error keeps its code", func(t *testing.T) {
		_, err := n.Call(hostlocal.Role, "STATUS", "", conf("1.1.0", `{}`), nil)
		checkErr(t, err, types.ErrInvalidNetworkConfig)
	})
}

func TestBusyStore(t *testing.T) {
	n := newNode(t)
	s, err := store.Open(n.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := conf("1.1.0", `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`)
	_, err = n.Call(hostlocal.Role, "ADD", "c1", c, env{store.EnvTimeout: "100ms"})
	checkErr(t, err, cniplug.CodeBusy, "busy", store.EnvTimeout)
	_, err = n.Call(hostlocal.Role, "DEL", "c1", c, env{store.EnvTimeout: "100ms"})
	checkErr(t, err, cniplug.CodeBusy)
	_, err = n.Call(hostlocal.Role, "STATUS", "", c, env{store.EnvTimeout: "100ms"})
	checkErr(t, err, cniplug.CodeNotReady, "busy")
	_, err = n.Call(hostlocal.Role, "ADD", "c1", c, env{store.EnvTimeout: "never"})
	checkErr(t, err, types.ErrInvalidEnvironmentVariables, store.EnvTimeout, `"never"`)
}

func TestStickyRole(t *testing.T) {
	n := newNode(t)
	ipam := `{"ranges":[[{"subnet":"10.1.0.0/24"}]],"sticky":true}`
	c := conf("1.0.0", ipam)
	pod := env{"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=db-0"}
	first := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, pod)).Addrs()
	n.Must(hostlocal.Role, "DEL", "c1", c, pod)
	n.Must(hostlocal.Role, "ADD", "other", c, nil)
	if got := parseResult(t, n.Must(hostlocal.Role, "ADD", "c2", c, pod)).Addrs(); !reflect.DeepEqual(got, first) {
		t.Errorf("re-created pod got %v, want %v", got, first)
	}
	s, _ := store.Open(n.Dir)
	defer s.Close()
	s.ViewIPAM("mynet", func(tx *store.IPAMTx) error {
		if r, _ := tx.Get(tx.ByOwner("c2", "eth0")[0].Addr); r.Pod != "ns/db-0" {
			t.Errorf("reservation pod %q", r.Pod)
		}
		return nil
	})
}

// TestConcurrentAdds runs 200 ADDs at once, each opening the store itself as
// separate processes would, on one /24 (253 usable addresses). Each waits
// for the store up to 5 minutes (CNIBOX_STORE_TIMEOUT): the last of 200
// waits for the 199 before it, which took more than the default 10 s on one
// emulated CPU (make test-kernel's VM under TCG); what the test judges is
// the addresses, not the machine's speed.
func TestConcurrentAdds(t *testing.T) {
	n := newNode(t)
	c := conf("1.0.0", `{"ranges":[[{"subnet":"10.1.0.0/24"}]]}`)
	const workers = 200
	addrs := make([]string, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out, err := n.Call(hostlocal.Role, "ADD", fmt.Sprintf("c%03d", i), c, map[string]string{store.EnvTimeout: "5m"})
			if err != nil {
				errs[i] = err
				return
			}
			var r struct {
				IPs []struct{ Address string } `json:"ips"`
			}
			errs[i] = json.Unmarshal(out, &r)
			if len(r.IPs) == 1 {
				addrs[i] = r.IPs[0].Address
			}
		}(i)
	}
	wg.Wait()
	seen := map[string]int{}
	for i, a := range addrs {
		if errs[i] != nil {
			t.Fatalf("ADD c%03d: %v", i, errs[i])
		}
		if j, dup := seen[a]; dup {
			t.Fatalf("c%03d and c%03d both got %s", j, i, a)
		}
		seen[a] = i
	}
	got := n.Reserved("mynet")
	if len(got) != workers {
		t.Fatalf("%d containers hold addresses, want %d", len(got), workers)
	}
	sorted := append([]string(nil), addrs...)
	sort.Strings(sorted)

	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, errs[i] = n.Call(hostlocal.Role, "DEL", fmt.Sprintf("c%03d", i), c, nil)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("DEL c%03d: %v", i, err)
		}
	}
	if got := n.Reserved("mynet"); len(got) != 0 {
		t.Errorf("%d containers still hold addresses after DEL", len(got))
	}
}
