package e2e

import (
	"fmt"
	"testing"
)

// TestReferenceBridgeUpstream compares the bridge fields v1.9.1 added
// (Debian's 1.1.1 lacks them) between upstream's reference and cnibox:
// portIsolation with host-local and a gateway, and disableContainerInterface
// without ipam (which the reference refuses with ipam); the pod's interface
// left down shows in the view ("up false"). The latter runs at 0.3.1 only,
// without CHECK: the reference's CHECK of a bridge without ipam fails ("no
// plugin name provided"), cnibox's passes (roles/bridge tests it). No ipam
// routes: cnibox writes their gateway into the result, the reference does not.
func TestReferenceBridgeUpstream(t *testing.T) {
	requireReference(t, "host-local")
	path := []string{upstreamRef(t, "bridge"), refDir}
	for _, v := range refVersions { // Debian's host-local, which the reference calls, speaks up to 1.0.0
		t.Run(v+"/portIsolation", func(t *testing.T) {
			t.Cleanup(func() { hostHandle(t).DeleteLink("refiso") })
			compareSidesWith(t, path, func(dir string) string {
				return fmt.Sprintf(`{"cniVersion":%q,"name":"iso","plugins":[{"type":"bridge","bridge":"refiso","isGateway":true,"portIsolation":true,"ipam":%s}]}`,
					v, ipamJSON(dir, `[[{"subnet":"10.58.0.0/24","gateway":"10.58.0.1"}]]`, `[]`))
			})
		})
	}
	t.Run("0.3.1/disableContainerInterface", func(t *testing.T) {
		t.Cleanup(func() { hostHandle(t).DeleteLink("refdown") })
		compareSidesWith(t, path, func(string) string {
			return `{"cniVersion":"0.3.1","name":"down","plugins":[{"type":"bridge","bridge":"refdown","disableContainerInterface":true}]}`
		})
	})
}
