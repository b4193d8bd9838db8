package agentapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A queued release is one file per attachment: a later one of the same
// attachment replaces it (an ADD then finds its own at PendingPath), and
// no temporary file is left for a reader of the directory to trip on.
func TestQueueRelease(t *testing.T) {
	dir := t.TempDir()
	first := &IPAMRequest{Network: "lan", ContainerID: "c1", IfName: "net1", PodRef: "ns/a"}
	again := &IPAMRequest{Network: "lan", ContainerID: "c1", IfName: "net1", PodRef: "ns/b"}
	other := &IPAMRequest{Network: "lan", ContainerID: "c1", IfName: "net2"}
	var paths []string
	for _, r := range []*IPAMRequest{first, again, other} {
		p, err := QueueRelease(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		if p != PendingPath(dir, r) {
			t.Errorf("QueueRelease wrote %s, PendingPath says %s", p, PendingPath(dir, r))
		}
		paths = append(paths, p)
	}
	if paths[0] != paths[1] || paths[0] == paths[2] {
		t.Errorf("paths %v: want one per attachment (network, container, interface)", paths)
	}
	entries, err := os.ReadDir(filepath.Join(dir, PendingDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v; want the two attachments' files alone", PendingDir, names)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var got IPAMRequest
	if err := json.Unmarshal(b, &got); err != nil || got.PodRef != "ns/b" {
		t.Errorf("%s: %s (%v); want the later release (pod ns/b)", paths[0], b, err)
	}
}
