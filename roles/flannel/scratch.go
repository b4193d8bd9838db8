package flannel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/internal/atomicfile"
)

const (
	// FlannelDataDir is where flannel's own plugin keeps the delegate
	// config of each sandbox (dataDir), a file named by the container ID.
	FlannelDataDir = "/var/lib/cni/flannel"
	// EnvFlannelDataDir overrides FlannelDataDir (a config's dataDir
	// overrides both); tests point it at a directory of their own.
	EnvFlannelDataDir = "CNIBOX_FLANNEL_DATA_DIR"
)

// dataDir is where flannel's plugin keeps its delegate records for this
// config.
func (c *flannelConf) dataDir(a *cniplug.Args) string {
	return a.Setting(c.DataDir, EnvFlannelDataDir, FlannelDataDir)
}

// scratch is flannel's own plugin's record of one sandbox: the delegate
// config it ran, in dataDir/CONTAINERID. cnibox's record lives in its
// store; flannel's is kept beside it so that either plugin deletes what
// the other set up when a node moves between them: flannel's plugin finds
// nothing to delete without its file (and leaves the pod's address taken
// in host-local), and a pod set up by flannel's plugin has only that file.
// As with host-local's records (docs/roles/host-local.md), cnibox writes
// it only where the directory exists, that is on a node that has run
// flannel's plugin; it never creates it.
type scratch struct{ path string }

// scratchOf is the record of the sandbox containerID in dir; ok is false
// when the directory does not exist or the ID cannot name a file there.
func scratchOf(dir, containerID string) (s scratch, ok bool) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return scratch{}, false
	}
	if containerID == "" || containerID != filepath.Base(containerID) || containerID == ".." {
		return scratch{}, false
	}
	return scratch{filepath.Join(dir, containerID)}, true
}

// write stores the delegate config as flannel's plugin does (mode 0600,
// synced), through a temporary file so that a reader never sees half.
func (s scratch) write(conf []byte) error {
	if err := atomicfile.WriteFile(s.path, conf, 0o600); err != nil {
		return fmt.Errorf("flannel: write flannel's delegate record %s: %w", s.path, err)
	}
	return nil
}

// read returns the delegate type and config flannel's plugin recorded;
// found is false when there is no record.
func (s scratch) read() (typ string, conf []byte, found bool, err error) {
	conf, err = os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, fmt.Errorf("flannel: read flannel's delegate record: %w", err)
	}
	var t struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(conf, &t); err != nil || t.Type == "" {
		// flannel's plugin gives up on such a file too; cnibox rebuilds
		// the delegate instead.
		return "", nil, false, nil
	}
	return t.Type, conf, true, nil
}

// remove deletes the record; a missing one is not an error.
func (s scratch) remove() error {
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("flannel: remove flannel's delegate record: %w", err)
	}
	return nil
}
