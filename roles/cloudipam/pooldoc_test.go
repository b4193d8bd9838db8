package cloudipam

import (
	"os"
	"testing"
)

// TestDocumentedPoolFile: the pool file docs/roles/cloud-ipam.md offers to
// copy (next to examples/77-file-pools.conflist, which names it) is one the
// file provider reads, with the NIC and subnet that conflist's DNS server
// belongs to.
func TestDocumentedPoolFile(t *testing.T) {
	body, err := os.ReadFile("../../docs/roles/cloud-ipam-pools.json")
	if err != nil {
		t.Fatal(err)
	}
	nics, err := parsePoolFile(body)
	if err != nil {
		t.Fatalf("docs/roles/cloud-ipam-pools.json: %v", err)
	}
	if len(nics) != 1 || nics[0].Subnet.String() != "10.50.0.0/24" || len(nics[0].Secondary) == 0 {
		t.Errorf("docs/roles/cloud-ipam-pools.json = %+v, want one NIC on 10.50.0.0/24 with secondary addresses", nics)
	}
}
