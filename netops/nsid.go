package netops

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NetnsID returns the id that the handle's namespace gives the network
// namespace at path (-1 when it gave it none). A veth whose peer is in that
// namespace reports the same id (PeerNetnsID): together with the peer's
// ifindex it names the peer without ambiguity, where ifindexes alone repeat
// from namespace to namespace.
func (h *Handle) NetnsID(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("network namespace id of %q: %w", path, err)
	}
	defer unix.Close(fd)
	id, err := h.nlh.GetNetNsIdByFd(fd)
	if err != nil {
		return -1, fmt.Errorf("network namespace id of %q in %s: %w", path, h.where(), err)
	}
	return id, nil
}

// PeerNetnsID returns the id, in the handle's namespace, of the namespace
// that holds the peer of the veth called name (IFLA_LINK_NETNSID), or -1
// when the peer is in the same namespace.
func (h *Handle) PeerNetnsID(name string) (int, error) {
	l, err := h.nlh.LinkByName(name)
	if err != nil {
		return -1, fmt.Errorf("get link %q in %s: %w", name, h.where(), classify(err))
	}
	return l.Attrs().NetNsID, nil
}
