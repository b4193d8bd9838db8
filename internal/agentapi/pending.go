package agentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cnibox/cnibox/internal/atomicfile"
)

// PendingDir is the directory, in the node's data directory, where cluster
// IPAM releases wait for the API: the whereabouts role's (a DEL that cannot
// reach the agent) and the agent's (a DEL, or the undo of a failed ADD,
// that the API did not take). One JSON IPAMRequest per attachment.
const PendingDir = "whereabouts-pending"

// PendingPath is where dataDir keeps the queued release of req's
// attachment (network, container, interface): one file per attachment, so
// a later release of it replaces the earlier, and an ADD finds its own at
// once.
func PendingPath(dataDir string, req *IPAMRequest) string {
	sum := sha256.Sum256([]byte(req.Network + "\x00" + req.ContainerID + "\x00" + req.IfName))
	return filepath.Join(dataDir, PendingDir, hex.EncodeToString(sum[:12])+".json")
}

// QueueRelease writes req at PendingPath, atomically (a reader sees all of
// it or none), and returns the path.
func QueueRelease(dataDir string, req *IPAMRequest) (string, error) {
	path := PendingPath(dataDir, req)
	d := filepath.Dir(path)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("queue the release: %w", err)
	}
	b, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	// Synced before the rename: after a power cut the queue holds the
	// release whole or not at all, never an empty file that the drain
	// drops as unreadable (the address would leak).
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return "", fmt.Errorf("queue the release in %s: %w", path, err)
	}
	return path, nil
}
