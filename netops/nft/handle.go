package nft

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/cnibox/cnibox/netops/internal/kerr"
	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// ErrNotFound, ErrExists and ErrNotSupported are netops' sentinels (the same
// values): errors.Is(err, netops.ErrNotFound) matches this package's errors.
const (
	ErrNotFound     = kerr.ErrNotFound
	ErrExists       = kerr.ErrExists
	ErrNotSupported = kerr.ErrNotSupported
)

// classify wraps err with ErrNotFound or ErrExists when the kernel's error
// means that.
func classify(err error) error { return kerr.Classify(err) }

// Handle is the nftables side of one network namespace: a lasting nftables
// connection, opened on first use, and what cnibox's tables learned about
// the kernel on it. A Handle is not safe for concurrent use.
type Handle struct {
	path  string
	nsFD  int  // the namespace's file descriptor; -1 for the caller's own
	ownNS bool // Close closes nsFD (Open); else the lender does (Lend)
	// dial, when set, is the socket the connection opens instead of
	// netlink (OpenDial: a test's in-memory kernel, netops/nft/nftfake).
	dial nltest.Func

	nft   *nftables.Conn  // lazy, lasting
	nfRaw *mdnetlink.Conn // the socket under nft, for requests nftables cannot build

	// tables: what each table learned about the kernel on this
	// connection, one value of the table's own state type each (stateOf:
	// masqState, portmapState, policyTable).
	tables map[any]any
	// expiring: elements given a timeout (masquerade, port mappings, the
	// source address check, the policy table's attached set), which
	// Close waits out (see waitExpired).
	expiring []expiringElem
	// quiet, when set, makes transactions quiet (txn_quiet.go), acked at
	// their end by an add of this table: the services table's, while it
	// writes.
	quiet *nftables.Table
}

// stateOf returns the state of type T (a table's) that h keeps, made on
// first use: a table's knowledge of the kernel lives in its own type, not
// in fields of the Handle.
func stateOf[T any](h *Handle) *T {
	key := (*T)(nil)
	if v, ok := h.tables[key]; ok {
		return v.(*T)
	}
	if h.tables == nil {
		h.tables = map[any]any{}
	}
	v := new(T)
	h.tables[key] = v
	return v
}

// Open returns a Handle for the network namespace at nsPath; an empty nsPath
// means the namespace of the calling process (the "host"). No socket is
// opened until the first request.
func Open(nsPath string) (*Handle, error) {
	if nsPath == "" {
		return &Handle{nsFD: -1}, nil
	}
	// Not opened unless it is an nsfs file: opening a FIFO would block.
	if st := (unix.Statfs_t{}); unix.Statfs(nsPath, &st) == nil && st.Type != unix.NSFS_MAGIC {
		return nil, fmt.Errorf("open network namespace %q: %w: not a namespace file", nsPath, ErrNotFound)
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("open network namespace %q: %w (%w)", nsPath, ErrNotFound, err)
		}
		return nil, fmt.Errorf("open network namespace %q: %w", nsPath, err)
	}
	return &Handle{path: nsPath, nsFD: fd, ownNS: true}, nil
}

// Lend returns a Handle on the namespace at nsPath whose file descriptor nsFD
// the caller holds open until the Handle's Close (netops.Handle lends its
// own this way: one namespace, both sides). nsFD is not read when nsPath is
// "" (the caller's namespace).
func Lend(nsPath string, nsFD int) *Handle {
	if nsPath == "" {
		nsFD = -1
	}
	return &Handle{path: nsPath, nsFD: nsFD}
}

// OpenDial returns a Handle whose nftables connection talks to dial
// instead of a kernel: tests open one on netops/nft/nftfake's in-memory
// kernel (nft.OpenDial(k.Dial())) to check what a table writes as a normal
// user. Everything else is as on a kernel, raw messages included.
func OpenDial(dial nltest.Func) *Handle { return &Handle{nsFD: -1, dial: dial} }

// Close waits out the elements this Handle gave a timeout (so that nothing
// sees them after it), then closes the nftables connection and, for a Handle
// from Open, the namespace. Closing an nftables socket after deletions waits
// for the kernel's deferred cleanup, so callers that delete nftables state
// and links should delete the links before calling Close.
func (h *Handle) Close() error {
	var errs []error
	if h.nft != nil {
		h.waitExpired()
		if err := h.nft.CloseLasting(); err != nil {
			errs = append(errs, fmt.Errorf("close nftables connection: %w", err))
		}
		h.nft, h.nfRaw = nil, nil
	}
	if h.ownNS && h.nsFD >= 0 {
		if err := unix.Close(h.nsFD); err != nil {
			errs = append(errs, fmt.Errorf("close network namespace %q: %w", h.path, err))
		}
		h.nsFD = -1
	}
	return errors.Join(errs...)
}

// reopen closes the nftables connection without waiting for anything, so
// that the next request opens a new one: what the old socket still held
// (acks of a batch that overflowed its buffer) cannot be read as another
// request's answer.
func (h *Handle) reopen() {
	if h.nft != nil {
		_ = h.nft.CloseLasting()
	}
	h.nft, h.nfRaw = nil, nil
}

// Path returns the namespace path the Handle was opened with ("" for the
// namespace of the calling process).
func (h *Handle) Path() string { return h.path }

// where names the namespace in error messages.
func (h *Handle) where() string { return kerr.Where(h.path) }
