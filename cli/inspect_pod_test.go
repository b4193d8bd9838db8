package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cnibox/cnibox/store"
)

// TestInspectEndpointsPod: --pod takes NAMESPACE/NAME or NAME in any
// namespace (as flows does); a filter that matches nothing says so on
// stderr instead of printing an empty table alone.
func TestInspectEndpointsPod(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []store.Endpoint{
		{Network: "n", ContainerID: "c1", IfName: "eth0", PodNamespace: "default", PodName: "web"},
		{Network: "n", ContainerID: "c2", IfName: "eth0", PodNamespace: "shop", PodName: "web"},
		{Network: "n", ContainerID: "c3", IfName: "eth0", PodNamespace: "default", PodName: "db"},
	} {
		if err := st.PutEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	for pod, want := range map[string][]string{"web": {"c1", "c2"}, "default/web": {"c1"}, "shop/db": nil} {
		out, errs, code := runApp("inspect", "endpoints", "--data-dir", dir, "--pod", pod, "--json")
		var eps []store.Endpoint
		if err := json.Unmarshal([]byte(out), &eps); err != nil || code != 0 {
			t.Fatalf("--pod %s: exit %d, %v, stderr %q", pod, code, err, errs)
		}
		var got []string
		for _, ep := range eps {
			got = append(got, ep.ContainerID)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("--pod %s: %v, want %v", pod, got, want)
		}
		if (len(want) == 0) != strings.Contains(errs, "no endpoint record matches") {
			t.Errorf("--pod %s: stderr %q", pod, errs)
		}
	}
}
