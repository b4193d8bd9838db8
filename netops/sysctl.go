package netops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/cnibox/cnibox/netops/internal/kerr"
)

// SysctlSetting is one sysctl key and the value to write to it.
type SysctlSetting struct {
	Key   string // "net.ipv4.ip_forward" or "net/ipv6/conf/eth0/disable_ipv6"
	Value string
}

// SetSysctl writes value to the sysctl key inside the Handle's namespace.
// The key is dotted ("net.ipv4.ip_forward") or, when a part contains a dot
// (an interface like "eth0.100"), slashed ("net/ipv4/conf/eth0.100/forwarding").
func (h *Handle) SetSysctl(key, value string) error {
	return h.SetSysctls(SysctlSetting{Key: key, Value: value})
}

// SetSysctls writes several sysctls, in order, with one switch into the
// Handle's namespace.
func (h *Handle) SetSysctls(settings ...SysctlSetting) error {
	return h.SetSysctlsAt("/proc/sys", settings...)
}

// SetSysctlsAt is SetSysctls through procSys, a mount of procfs's sys
// directory other than /proc/sys (a container's /proc/sys is read-only; a
// hostPath mount of the host's /proc/sys/net under procSys is not, and
// its net entries are those of the writer's namespace, as /proc/sys's).
func (h *Handle) SetSysctlsAt(procSys string, settings ...SysctlSetting) error {
	paths := make([]string, len(settings))
	for i, s := range settings {
		p, err := sysctlPath(s.Key)
		if err != nil {
			return err
		}
		paths[i] = strings.TrimSuffix(procSys, "/") + strings.TrimPrefix(p, "/proc/sys")
	}
	return h.inNS(func() error {
		for i, s := range settings {
			if err := writeSysctl(paths[i], s.Value); err != nil {
				return fmt.Errorf("set sysctl %s=%q in %s: %w", s.Key, s.Value, h.where(), err)
			}
		}
		return nil
	})
}

// Sysctl reads the sysctl key inside the Handle's namespace, without the
// trailing newline.
func (h *Handle) Sysctl(key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	var b []byte
	err = h.inNS(func() error {
		var err error
		b, err = os.ReadFile(p)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read sysctl %s in %s: %w", key, h.where(), fsError(err))
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// sysctlPath maps a sysctl key to its file under /proc/sys.
func sysctlPath(key string) (string, error) {
	k := strings.TrimPrefix(key, "/proc/sys/")
	if !strings.Contains(k, "/") {
		k = strings.ReplaceAll(k, ".", "/")
	}
	k = strings.Trim(k, "/")
	if k == "" {
		return "", fmt.Errorf("sysctl: empty key")
	}
	for _, part := range strings.Split(k, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("sysctl: invalid key %q", key)
		}
	}
	return "/proc/sys/" + k, nil
}

func writeSysctl(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fsError(err)
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// fsError adds ErrNotFound to a missing-file error.
func fsError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return kerr.Wrap(ErrNotFound, err)
	}
	return err
}
