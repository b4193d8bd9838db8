package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/cnibox/cnibox/store"
)

// TestDHCPLeases: the table shows server, state, renewal and expiry; the
// doctor fails for an expired lease and a lease past its expiry, and
// passes otherwise.
func TestDHCPLeases(t *testing.T) {
	now := time.Now()
	leases := []store.DHCPLease{
		{Network: "lan", ContainerID: "c1", IfName: "eth0", Pod: "default/a", Address: "10.56.0.5/24", Server: "10.56.0.1", State: store.DHCPBound, Renewed: now, Expires: now.Add(time.Minute)},
		{Network: "lan", ContainerID: "c2", IfName: "eth0", Address: "10.56.0.6/24", Server: "10.56.0.1", State: store.DHCPExpired, Renewed: now.Add(-3 * time.Minute), Expires: now.Add(-time.Minute)},
	}
	var b bytes.Buffer
	if err := printDHCPLeases(&b, leases); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"SERVER", "LAST RENEWAL", "10.56.0.5/24", "10.56.0.1", "expired", "default/a"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, b.String())
		}
	}
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if err := st.DHCP().Put(l); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	if err := dataDirFlag.Apply(fs); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--data-dir", dir}); err != nil {
		t.Fatal(err)
	}
	c := ucli.NewContext(ucli.NewApp(), fs, nil)
	d := &doctor{}
	d.checkDHCPLeases(c)
	if len(d.results) != 1 || d.results[0].Status != statusFail || !strings.Contains(d.results[0].Detail, "10.56.0.6/24") {
		t.Errorf("doctor: %+v, want one failure for 10.56.0.6/24", d.results)
	}
}
