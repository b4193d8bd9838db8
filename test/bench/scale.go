package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/ipam"
	"github.com/cnibox/cnibox/store"
)

// The host-local rows: one ADD and one DEL of host-local alone, with many
// reservations already in an IPv4 /14.
const (
	scaleGroup  = "host-local alone"
	scaleNet    = "scalenet"
	scaleSubnet = "10.64.0.0/14"
)

// scaleFirst is the first address host-local hands out in scaleSubnet (the
// gateway, .1, is skipped by both).
var scaleFirst = netip.MustParseAddr("10.64.0.2")

func (b *bench) runScale() {
	b.useLog("other", "")
	sizes := append([]int{0}, b.o.scale...)
	nsName, nsPath, err := b.newNS()
	if err != nil {
		b.fail("host-local scale: create pod namespace: %v", err)
		return
	}
	defer b.deleteNS(nsName)
	// Every size is populated first, then the timed ADD/DEL pairs go round
	// the sizes (and sides) rep by rep, so that the machine's drift over the
	// minutes of the run falls on every size alike (the target compares
	// each size with our own time at 0).
	allDirs := map[int]map[string]string{}
	allLists := map[int]map[string]*libcni.NetworkConfigList{}
	defer func() {
		for _, dirs := range allDirs {
			for _, d := range dirs {
				os.RemoveAll(d)
			}
		}
	}()
	for _, size := range sizes {
		if b.stopping.Load() {
			return
		}
		b.logf("host-local with %d existing reservations: populating", size)
		dirs, lists := map[string]string{}, map[string]*libcni.NetworkConfigList{}
		allDirs[size], allLists[size] = dirs, lists
		for _, s := range b.sides {
			dir, err := os.MkdirTemp(b.tmp, fmt.Sprintf("scale-%s-%d-", s.name, size))
			if err != nil {
				b.fail("host-local scale: %v", err)
				return
			}
			t0 := time.Now()
			if s.ours {
				err = populateOurs(dir, size)
			} else {
				err = populateRef(dir, size)
			}
			if err != nil {
				b.fail("host-local scale: populate %s with %d reservations: %v", s.name, size, err)
				return
			}
			b.vlogf("populated %s with %d in %.1fs", s.name, size, time.Since(t0).Seconds())
			dirs[s.name] = dir
			if lists[s.name], err = scaleList(dir); err != nil {
				b.fail("host-local scale: %v", err)
				return
			}
		}
	}
	for rep := 0; rep < b.o.scaleReps && !b.stopping.Load(); rep++ {
		for _, size := range sizes {
			dirs, lists, mode := allDirs[size], allLists[size], fmt.Sprintf("%d existing", size)
			for _, s := range b.sides {
				what := fmt.Sprintf("host-local %s %s rep %d", mode, s.name, rep)
				id := containerID("scale", os.Getpid(), size, rep, s.name)
				rt := &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: "eth0",
					Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "bench"}, {"K8S_POD_NAME", "scale"}}}
				list := lists[s.name]
				ctx, cancel := opCtx()
				t0 := time.Now()
				r, err := s.cni.AddNetworkList(ctx, list, rt)
				dAdd := time.Since(t0)
				cancel()
				b.recordOne(scaleGroup, mode, opAdd, s.name, dAdd, err)
				if err != nil {
					b.fail("%s: ADD: %v", what, err)
				} else if res, err := current.NewResultFromResult(r); err != nil || len(res.IPs) != 1 {
					b.fail("%s: ADD result %v: %v", what, r, err)
				} else {
					a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
					last := scaleFirst
					for i := 0; i < size; i++ {
						last = last.Next()
					}
					// Populated: [scaleFirst, last). The new one must be past them.
					if a = a.Unmap(); a.Less(last) {
						b.fail("%s: ADD handed out %s, already reserved by the populated set", what, a)
					}
				}
				ctx, cancel = opCtx()
				t0 = time.Now()
				err = s.cni.DelNetworkList(ctx, list, rt)
				dDel := time.Since(t0)
				cancel()
				b.recordOne(scaleGroup, mode, opDel, s.name, dDel, err)
				if err != nil {
					b.fail("%s: DEL: %v", what, err)
				}
				if n := countReservations(s, dirs[s.name]); n != size {
					b.fail("%s: %d reservations after DEL, want the %d populated", what, n, size)
				}
				if files := filesUnder(s.cacheDir); len(files) > 0 {
					b.fail("%s: %d libcni cache files left after DEL", what, len(files))
				}
			}
		}
	}
}

// recordOne adds one call's latency to a sample (its wall time too).
func (b *bench) recordOne(group, mode, op, side string, d time.Duration, err error) {
	s := b.sampleFor(group, mode, op, side)
	b.mu.Lock()
	defer b.mu.Unlock()
	s.lat = append(s.lat, d)
	s.wall += d
	if err != nil {
		s.errs++
	}
}

func scaleList(dataDir string) (*libcni.NetworkConfigList, error) {
	bs, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       scaleNet,
		"plugins": []map[string]any{{
			"type": "host-local",
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]any{{{"subnet": scaleSubnet}}},
				"dataDir": dataDir,
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(bs)
}

// populateOurs reserves n addresses in our store with the allocator, in one
// transaction, as n ADDs would have.
func populateOurs(dir string, n int) error {
	sets, err := ipam.ParseSets("ipam.ranges", [][]ipam.RangeConfig{{{Subnet: scaleSubnet}}})
	if err != nil {
		return err
	}
	s, err := store.Open(dir)
	if err != nil {
		return err
	}
	err = s.IPAM(scaleNet, func(tx *store.IPAMTx) error {
		for i := 0; i < n; i++ {
			if _, err := ipam.Allocate(tx, ipam.Request{
				ContainerID: containerID("pre", i), IfName: "eth0", Pod: fmt.Sprintf("bench/pre-%d", i), Sets: sets,
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// populateRef writes n reservations in the reference host-local's format:
// one file per address named after it holding "<container ID>\r\n<ifname>",
// and last_reserved_ip.0 holding the last one.
func populateRef(dir string, n int) error {
	nd := filepath.Join(dir, scaleNet)
	if err := os.MkdirAll(nd, 0o755); err != nil {
		return err
	}
	a := scaleFirst
	var last netip.Addr
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(nd, a.String()), []byte(containerID("pre", i)+"\r\neth0"), 0o644); err != nil {
			return err
		}
		last, a = a, a.Next()
	}
	if last.IsValid() {
		return os.WriteFile(filepath.Join(nd, "last_reserved_ip.0"), []byte(last.String()), 0o644)
	}
	return nil
}

// countReservations counts a side's reservations of the scale network.
func countReservations(s *side, dir string) int {
	if !s.ours {
		return len(refReservations(dir, scaleNet))
	}
	st, err := store.OpenWith(dir, store.Options{NoCreate: true})
	if err != nil {
		return -1
	}
	defer st.Close()
	n := 0
	st.ViewIPAM(scaleNet, func(tx *store.IPAMTx) error { n = len(tx.All()); return nil })
	return n
}
