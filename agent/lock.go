package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cnibox/cnibox/store"
)

// LockFileName is the file in the data directory that one running agent
// holds locked (flock), with its PID inside.
const LockFileName = "agent.lock"

// ErrAgentRunning is returned when another agent holds the data directory.
var ErrAgentRunning = errors.New("another cnibox-agent uses this data directory")

// lockDataDir takes the agent's lock in the data directory (creating the
// directory if needed) and returns the function that releases it. A second
// agent on the same directory gets ErrAgentRunning naming the file and the
// holder's PID: two agents on one directory would publish one VTEP MAC.
func lockDataDir(dataDir string) (func(), error) {
	dir := store.Dir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("agent: data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by pid %s: stop that agent or give this one its own --data-dir", ErrAgentRunning, path, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("agent: lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
