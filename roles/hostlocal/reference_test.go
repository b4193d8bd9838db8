package hostlocal_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/internal/testenv"
	"github.com/cnibox/cnibox/roles/hostlocal"
)

// refHostLocal is the reference host-local (Debian's containernetworking-plugins).
const refHostLocal = "/usr/lib/cni/host-local"

// refRecords lists dir's address records: address -> content.
func refRecords(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if strings.Count(e.Name(), ".") == 3 {
			data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			out[e.Name()] = string(data)
		}
	}
	return out
}

// refCall runs the reference host-local with conf.
func refCall(t *testing.T, cmd, cid, conf string) string {
	t.Helper()
	c := exec.Command(refHostLocal)
	c.Env = []string{"CNI_COMMAND=" + cmd, "CNI_CONTAINERID=" + cid, "CNI_NETNS=/var/run/netns/" + cid, "CNI_IFNAME=eth0", "CNI_PATH=/usr/lib/cni"}
	c.Stdin = strings.NewReader(conf)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("reference host-local %s %s: %v\n%s", cmd, cid, err, out)
	}
	if cmd != "ADD" {
		return ""
	}
	var r struct{ IPs []struct{ Address string } }
	if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
		t.Fatalf("reference host-local ADD %s: %v %s", cid, err, out)
	}
	return r.IPs[0].Address
}

// TestReferenceRecords: on a node where the reference host-local keeps
// records of the network (a flannel node: /var/lib/cni/networks/cbr0),
// cnibox and the reference follow each other without giving an address
// twice: cnibox skips the reference's addresses and writes records of its
// own, which the reference skips in turn; a DEL through cnibox removes the
// record of an attachment the reference made. Without that directory
// cnibox writes nothing there.
func TestReferenceRecords(t *testing.T) {
	if _, err := os.Stat(refHostLocal); err != nil {
		if !testenv.Root() { // make check: no apt-get
			t.Skipf("%v (apt-get install containernetworking-plugins), and not root", err)
		}
		t.Fatalf("%v (make deps installs containernetworking-plugins)", err)
	}
	n := newNode(t)
	dataDir := t.TempDir()
	ipamJSON := `{"type":"host-local","dataDir":"` + dataDir + `","ranges":[[{"subnet":"10.1.0.0/24"}]]}`
	c := conf("0.3.1", ipamJSON)
	dir := filepath.Join(dataDir, "mynet")

	// the reference first: it makes the directory
	if got := refCall(t, "ADD", "ref1", c); got != "10.1.0.2/24" {
		t.Fatalf("reference ADD: %s", got)
	}
	// cnibox skips its address, and writes its own record
	if got := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, nil)).Addrs(); !reflect.DeepEqual(got, []string{"10.1.0.3/24"}) {
		t.Fatalf("cnibox ADD after the reference's: %v, want 10.1.0.3/24", got)
	}
	want := map[string]string{"10.1.0.2": "ref1\r\neth0", "10.1.0.3": "c1\r\neth0"}
	if got := refRecords(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	// the reference skips cnibox's
	if got := refCall(t, "ADD", "ref2", c); got != "10.1.0.4/24" {
		t.Fatalf("reference ADD after cnibox's: %s, want 10.1.0.4/24", got)
	}
	// a requested address the reference holds is refused
	_, err := n.Call(hostlocal.Role, "ADD", "c2", c, env{"CNI_ARGS": "IP=10.1.0.4"})
	checkErr(t, err, 7, "10.1.0.4", "reference host-local")
	// DEL through cnibox of an attachment the reference made
	n.Must(hostlocal.Role, "DEL", "ref1", c, nil)
	// DEL through the reference of one cnibox made
	refCall(t, "DEL", "c1", c)
	var left []string
	for a := range refRecords(t, dir) {
		left = append(left, a)
	}
	sort.Strings(left)
	if !reflect.DeepEqual(left, []string{"10.1.0.4"}) {
		t.Fatalf("records after the DELs: %v, want ref2's 10.1.0.4 alone", left)
	}
	n.Must(hostlocal.Role, "DEL", "c1", c, nil) // the store's reservation; the record is gone already
	if got := n.Reserved("mynet"); len(got) != 0 {
		t.Errorf("the store still holds %v", got)
	}

	// no reference directory: nothing written beside the store
	other := t.TempDir()
	n.Must(hostlocal.Role, "ADD", "c3", conf("0.3.1", `{"type":"host-local","dataDir":"`+other+`","ranges":[[{"subnet":"10.1.0.0/24"}]]}`), nil)
	if _, err := os.Stat(filepath.Join(other, "mynet")); !os.IsNotExist(err) {
		t.Errorf("cnibox made the reference's directory: %v", err)
	}
}

// TestRefDataDirEnv: without dataDir, the reference's records are looked
// for in $CNIBOX_HOSTLOCAL_DATA_DIR/NETWORK (tests point it at a directory
// of their own; a node at /var/lib/cni/networks): an address recorded there
// is skipped, and cnibox's own is recorded beside it and removed on DEL.
func TestRefDataDirEnv(t *testing.T) {
	n := newNode(t)
	refDir := filepath.Join(t.TempDir(), "networks")
	dir := filepath.Join(refDir, "mynet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "10.1.0.2"), []byte("ref1\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := conf("1.0.0", `{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/24"}]]}`)
	e := env{hostlocal.EnvRefDataDir: refDir}
	if got := parseResult(t, n.Must(hostlocal.Role, "ADD", "c1", c, e)).Addrs(); !reflect.DeepEqual(got, []string{"10.1.0.3/24"}) {
		t.Fatalf("ADD beside a record of 10.1.0.2 in $%s: %v, want 10.1.0.3/24", hostlocal.EnvRefDataDir, got)
	}
	want := map[string]string{"10.1.0.2": "ref1\r\neth0", "10.1.0.3": "c1\r\neth0"}
	if got := refRecords(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	n.Must(hostlocal.Role, "DEL", "c1", c, e)
	if got, want := refRecords(t, dir), map[string]string{"10.1.0.2": "ref1\r\neth0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("records after DEL %v, want %v", got, want)
	}
}
