package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// EnvBootID, when set, replaces the kernel's boot ID (BootID). It is for
// tests only: changing it plays a reboot. Never set it on a node.
const EnvBootID = "CNIBOX_BOOT_ID"

// bucketMeta holds facts about the store file itself:
//
//	meta/  "schema" -> schema version (one byte, SchemaVersion)
//	       "bootID" -> the boot that last ran ReclaimAfterReboot
var (
	bucketMeta = []byte("meta")
	metaBoot   = []byte("bootID")
)

// ReclaimOptions tune ReclaimAfterReboot and ReleaseStaleSticky.
type ReclaimOptions struct {
	// BootID is the current boot; "" means BootID().
	BootID string
	// Alive reports whether a network namespace path still names a network
	// namespace; nil means IsNetns.
	Alive func(netns string) bool
}

func (o ReclaimOptions) boot() string {
	if o.BootID != "" {
		return o.BootID
	}
	return BootID()
}

func (o ReclaimOptions) alive(netns string) bool {
	if netns == "" {
		return false
	}
	if o.Alive != nil {
		return o.Alive(netns)
	}
	return IsNetns(netns)
}

// Reclaimed is what ReclaimAfterReboot did.
type Reclaimed struct {
	// Boot is the current boot; Ran says whether this call was the first of
	// the boot (and so looked at all).
	Boot string
	Ran  bool
	// Released are the reservations freed, Deleted the endpoint records
	// removed: attachments of earlier boots whose namespace is gone.
	Released []Reservation
	Deleted  []Endpoint
	// KeptSticky are reservations of earlier boots kept for their pod (the
	// network gives pods their address back, see ReleaseStaleSticky).
	KeptSticky []Reservation
	// KeptAlive are reservations of earlier boots whose namespace still
	// exists (a pod that outlived the boot ID, or a path reused).
	KeptAlive []Reservation
}

// IsNetns reports whether path names a network namespace (a file of the
// nsfs file system, such as /run/netns/NAME or /proc/PID/ns/net).
func IsNetns(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// ReclaimAfterReboot frees the ghosts a reboot leaves: on the first call of a
// boot (the store's recorded boot differs from the current one) it releases,
// in every network, the reservations made in an earlier boot whose
// attachment's namespace is gone (no endpoint record naming a namespace that
// still exists), deletes the endpoint records of earlier boots whose
// namespace is gone, and records the current boot. Every later call of the
// boot costs one read. A reservation of an earlier boot that a pod's sticky
// record names is kept for that pod (ReleaseStaleSticky hands it over when
// the pod comes back). Records without a boot ID are left alone.
//
// It runs in the transaction of t, whatever network t is for; a caller runs
// it before allocating, so the first ADD after a reboot already sees a clean
// pool.
func (t *IPAMTx) ReclaimAfterReboot(o ReclaimOptions) (Reclaimed, error) {
	out := Reclaimed{Boot: o.boot()}
	if out.Boot == "" {
		return out, nil // no boot ID: nothing can be told apart
	}
	if m := t.tx.Bucket(bucketMeta); m != nil && bytes.Equal(m.Get(metaBoot), []byte(out.Boot)) {
		return out, nil
	}
	out.Ran = true
	eps := t.tx.Bucket(endpointRecords.bucket)
	// stale reports whether an attachment of network is a ghost of an
	// earlier boot: its record's boot differs and no namespace of it is left.
	stale := func(network, containerID, ifname, boot string) bool {
		if boot == "" || boot == out.Boot {
			return false
		}
		if eps == nil {
			return true
		}
		v := eps.Get(endpointKey(network, containerID, ifname))
		if v == nil {
			return true
		}
		var e Endpoint
		if err := json.Unmarshal(v, &e); err != nil {
			return false // leave what cannot be read to `cnibox store check`
		}
		return !o.alive(e.Netns)
	}

	if top := t.tx.Bucket(bucketIPAM); top != nil {
		var networks []string
		if err := top.ForEach(func(k, v []byte) error {
			if v == nil {
				networks = append(networks, string(k))
			}
			return nil
		}); err != nil {
			return out, err
		}
		for _, network := range networks {
			nt := newIPAMTx(t.tx, network)
			for _, r := range nt.All() {
				if !stale(network, r.ContainerID, r.IfName, r.BootID) {
					if r.BootID != "" && r.BootID != out.Boot {
						out.KeptAlive = append(out.KeptAlive, r)
					}
					continue
				}
				if r.Pod != "" && slices.Contains(nt.Sticky(r.Pod), r.Addr) {
					out.KeptSticky = append(out.KeptSticky, r)
					continue
				}
				if err := nt.Release(r.Addr); err != nil {
					return out, err
				}
				out.Released = append(out.Released, r)
			}
			if nt.err != nil {
				return out, nt.err
			}
		}
	}

	if eps != nil {
		var drop [][]byte
		err := eps.ForEach(func(k, v []byte) error {
			var e Endpoint
			if json.Unmarshal(v, &e) != nil {
				return nil
			}
			if e.BootID != "" && e.BootID != out.Boot && !o.alive(e.Netns) {
				drop = append(drop, append([]byte(nil), k...))
				out.Deleted = append(out.Deleted, e)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		for _, k := range drop {
			if err := eps.Delete(k); err != nil {
				return out, fmt.Errorf("store: delete endpoint record of an earlier boot: %w", err)
			}
		}
	}

	m, err := t.tx.CreateBucketIfNotExists(bucketMeta)
	if err == nil {
		err = m.Put(metaBoot, []byte(out.Boot))
	}
	if err == nil && m.Get(metaSchema) == nil {
		err = m.Put(metaSchema, []byte{SchemaVersion}) // a file from before versions were recorded
	}
	if err != nil {
		return out, fmt.Errorf("store: record boot %s: %w", out.Boot, err)
	}
	t.changed = true
	return out, nil
}

// ReleaseStaleSticky releases the reservations in t's network that
// ReclaimAfterReboot kept for sticky pods: made in an earlier boot, for an
// attachment whose namespace is gone. With a pod it releases only the
// addresses of that pod's sticky record (the pod is back: the allocator
// gives them to its new attachment in the same transaction); with pod ""
// every such reservation of the network (the pool ran out: ghosts yield to
// live pods). It returns what it released.
func (t *IPAMTx) ReleaseStaleSticky(pod string, o ReclaimOptions) ([]Reservation, error) {
	boot := o.boot()
	if boot == "" {
		return nil, nil
	}
	var candidates []Reservation
	if pod != "" {
		for _, a := range t.Sticky(pod) {
			if r, held := t.Get(a); held && r.Pod == pod {
				candidates = append(candidates, r)
			}
		}
	} else {
		candidates = t.All()
	}
	eps := t.tx.Bucket(endpointRecords.bucket)
	var out []Reservation
	for _, r := range candidates {
		if r.BootID == "" || r.BootID == boot {
			continue
		}
		if eps != nil {
			if v := eps.Get(endpointKey(t.network, r.ContainerID, r.IfName)); v != nil {
				var e Endpoint
				if json.Unmarshal(v, &e) != nil || o.alive(e.Netns) {
					continue
				}
			}
		}
		if err := t.Release(r.Addr); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
