package hostlocal

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/ipam"
)

const (
	// RefDataDir is the reference host-local's default dataDir: it keeps
	// one network's records in RefDataDir/NETWORK, a file per address named
	// by the address and holding "CONTAINERID\r\nIFNAME" (older versions:
	// the ID alone), under a flock of the file "lock" there.
	RefDataDir = "/var/lib/cni/networks"
	// EnvRefDataDir overrides RefDataDir (a config's dataDir overrides
	// both); tests point it at a directory of their own, so that they
	// never read the machine's (root's alone, 0700, wherever containerd,
	// CRI-O or root podman ran).
	EnvRefDataDir = "CNIBOX_HOSTLOCAL_DATA_DIR"
)

// refLineBreak separates the container ID and the ifname in a record.
const refLineBreak = "\r\n"

// refStore is the reference host-local's records of one network on this
// node, when it has some (a node that ran flannel's plugin, or the
// reference bridge with host-local, before cnibox): cnibox never hands out
// an address one of them holds, writes a record of its own for every
// address it reserves and removes it on release, so that either plugin can
// follow the other on the node without giving an address twice
// (docs/roles/host-local.md).
type refStore struct {
	dir  string
	lock *os.File
}

// openRefStore locks and returns the call's network's reference records:
// in dataDir/NETWORK as the reference reads its dataDir, else in
// $CNIBOX_HOSTLOCAL_DATA_DIR/NETWORK, else in RefDataDir/NETWORK. It
// returns nil when that directory does not exist (nothing to honour: cnibox
// does not create it).
func openRefStore(a *cniplug.Args, dataDir string) (*refStore, error) {
	dir := filepath.Join(a.Setting(dataDir, EnvRefDataDir, RefDataDir), a.Conf.Name)
	if fi, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) || err == nil && !fi.IsDir() {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("the reference host-local's records %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the reference host-local's records %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the reference host-local's records %s: %w", dir, err)
	}
	return &refStore{dir: dir, lock: f}, nil
}

// close unlocks the records.
func (s *refStore) close() {
	if s != nil {
		s.lock.Close()
	}
}

// record is one address's record: its address and owner.
type record struct {
	addr       netip.Addr
	id, ifname string
}

// owns: the record is the attachment's (a record of the ID alone is the
// ID's on any interface, as the reference reads it).
func (r record) owns(id, ifname string) bool {
	return r.id == strings.TrimSpace(id) && (r.ifname == "" || r.ifname == ifname)
}

// records reads every address record (other files, such as the lock and
// last_reserved_ip.N, are not addresses and are skipped).
func (s *refStore) records() ([]record, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("the reference host-local's records %s: %w", s.dir, err)
	}
	var out []record
	for _, e := range ents {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("the reference host-local's record %s: %w", filepath.Join(s.dir, e.Name()), err)
		}
		id, ifname, _ := strings.Cut(strings.TrimSpace(string(data)), refLineBreak)
		out = append(out, record{addr: addr, id: strings.TrimSpace(id), ifname: strings.TrimSpace(ifname)})
	}
	return out, nil
}

// taken lists the addresses other attachments hold.
func (s *refStore) taken(id, ifname string) ([]netip.Addr, error) {
	if s == nil {
		return nil, nil
	}
	recs, err := s.records()
	var out []netip.Addr
	for _, r := range recs {
		if !r.owns(id, ifname) {
			out = append(out, r.addr)
		}
	}
	return out, err
}

// reserve writes the attachment's record of each address (one it already
// has is left alone).
func (s *refStore) reserve(allocs []ipam.Allocation, id, ifname string) error {
	if s == nil {
		return nil
	}
	for _, al := range allocs {
		p := filepath.Join(s.dir, al.Addr.Addr().String())
		f, err := os.OpenFile(p, os.O_RDWR|os.O_EXCL|os.O_CREATE, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // ours: taken excluded every other owner's
		}
		if err != nil {
			return fmt.Errorf("write the reference host-local's record %s: %w", p, err)
		}
		_, err = f.WriteString(strings.TrimSpace(id) + refLineBreak + ifname)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
			return fmt.Errorf("write the reference host-local's record %s: %w", p, err)
		}
	}
	return nil
}

// release removes the attachment's records.
func (s *refStore) release(id, ifname string) error {
	if s == nil {
		return nil
	}
	recs, err := s.records()
	for _, r := range recs {
		if r.owns(id, ifname) {
			if rerr := os.Remove(filepath.Join(s.dir, r.addr.String())); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}
	return err
}
