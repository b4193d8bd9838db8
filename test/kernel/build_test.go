package main

import (
	"maps"
	"os"
	"slices"
	"testing"
)

// A pattern's :REGEXP is that pattern's packages' own -test.run, and no
// other package's; a pattern whose directory is missing names nothing.
func TestSelectPackages(t *testing.T) {
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir("test/kernel") })
	pkgs, runs, err := selectPackages([]string{"./roles/vlan", "./netops/nft/...:^TestX$", "./test/e2e:^TestReferenceVlan$", "./nowhere/..."})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"roles/vlan", "netops/nft", "netops/nft/nftfake", "test/e2e"} {
		if !slices.Contains(pkgs, p) {
			t.Errorf("packages %v lack %s", pkgs, p)
		}
	}
	want := map[string]string{"netops/nft": "^TestX$", "netops/nft/nftfake": "^TestX$", "test/e2e": "^TestReferenceVlan$"}
	if !maps.Equal(runs, want) {
		t.Errorf("runs %v, want %v", runs, want)
	}
}
