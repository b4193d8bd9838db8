package vxlan

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// lease is what the role knows of the node's lease before delegating.
type lease struct {
	subnetFile string
	// fromAgent: cnibox-agent recorded it in the store; false when only a
	// subnet file (flanneld's) exists.
	fromAgent bool
	state     store.OverlayState
}

// errNotReady says why pods cannot be attached yet; the caller gives it
// code 11 (ADD, CHECK) or 50 (STATUS).
type errNotReady struct{ why string }

func (e *errNotReady) Error() string {
	return "the overlay is not ready: " + e.why
}

// findLease reads the agent's record from the store (the one for c.Device,
// or the only one) and checks that the agent holds a lease and its device
// is up. Without a record, a subnet file (written by flanneld) will do. On
// an *errNotReady about a recorded agent, the lease is returned too (DEL and
// GC use its subnet file).
func findLease(a *cniplug.Args, c *conf) (*lease, error) {
	dir := store.DirFrom("", a.Getenv)
	var states []store.OverlayState
	st, err := store.OpenWith(dir, store.Options{Getenv: a.Getenv, NoCreate: true})
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		if c.Device != "" {
			var s store.OverlayState
			var found bool
			s, found, err = st.Overlay(c.Device)
			if found {
				states = append(states, s)
			}
		} else {
			states, err = st.Overlays()
		}
		st.Close()
		if err != nil {
			return nil, err
		}
	}

	if len(states) > 1 {
		var names []string
		for _, s := range states {
			names = append(names, s.Lease.Device)
		}
		return nil, cniplug.ConfError("device", "this node has several overlays (%s): name the agent's device in the config", strings.Join(names, ", "))
	}
	if len(states) == 1 {
		s := states[0]
		l := &lease{subnetFile: c.SubnetFile, fromAgent: true, state: s}
		if l.subnetFile == "" {
			l.subnetFile = s.Lease.SubnetFile
		}
		if l.subnetFile == "" {
			l.subnetFile = defaultSubnetFile
		}
		if !s.Ready {
			return l, &errNotReady{fmt.Sprintf("cnibox-agent has not acquired a lease for device %s yet (store %s): wait for it, and see its log", s.Lease.Device, dir)}
		}
		if !hasDevice(s.Lease.Type) {
			return l, nil
		}
		if err := deviceUp(s.Lease.Device); err != nil {
			return l, err
		}
		if s.Lease.Device6 != "" {
			if err := deviceUp(s.Lease.Device6); err != nil {
				return l, err
			}
		}
		return l, nil
	}

	sf := c.SubnetFile
	if sf == "" {
		sf = defaultSubnetFile
	}
	if _, err := os.Stat(sf); err == nil {
		return &lease{subnetFile: sf}, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, cniplug.Errorf(types.ErrIOFailure, "vxlan: subnet file %s: %w", sf, err)
	}
	what := "no overlay agent state in the store " + dir
	if c.Device != "" {
		what = fmt.Sprintf("no overlay agent state for device %s in the store %s", c.Device, dir)
	}
	return nil, &errNotReady{fmt.Sprintf("%s and no subnet file %s: start cnibox-agent on this node (with the same data dir) and wait until it holds a lease", what, sf)}
}

// hasDevice reports whether the agent's backend type has a device (host-gw
// routes over the node's own interface, alloc programs nothing: their
// record names the type where the device would be).
func hasDevice(backendType string) bool {
	return backendType != "host-gw" && backendType != "alloc"
}

// deviceUp checks that the agent's VXLAN device exists and is up.
func deviceUp(name string) error {
	h, err := netops.Open("")
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "vxlan: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if errors.Is(err, netops.ErrNotFound) {
		return &errNotReady{fmt.Sprintf("the VXLAN device %s does not exist: is cnibox-agent running? it re-creates the device", name)}
	}
	if err != nil {
		return cniplug.Errorf(types.ErrIOFailure, "vxlan: %w", err)
	}
	if !l.Up {
		return &errNotReady{fmt.Sprintf("the VXLAN device %s is down: cnibox-agent brings it up; is it running?", name)}
	}
	return nil
}

// readyErr gives a not-ready error its code for the verb.
func readyErr(err error, code uint) error {
	var nr *errNotReady
	if errors.As(err, &nr) {
		return cniplug.Errorf(code, "vxlan: %w", err)
	}
	return err
}
