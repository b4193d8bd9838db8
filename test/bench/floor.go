package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/cnibox/cnibox/netops"
)

// The kernel floor: a bare veth pair (peer created in the pod namespace as
// eth0) created and deleted directly through netops, in this process, with
// the same concurrency as the CNI batches. A plugin's DEL cannot be cheaper
// than the veth delete.
//
// Next to it, the nftables floor: one masquerade map element added, and
// deleted, each through a fresh netops handle as a plugin process would; the
// close of the handle is timed apart, because closing a netlink socket that
// deleted nftables objects waits for the kernel's deferred cleanup.
//
// A plugin is a fresh process, so the floor its DEL is judged against is the
// veth delete done by a fresh process: the veths are made again and each is
// deleted by an exec of a static Go binary that sends one RTM_DELLINK.
//
// A macvlan's delete does not wait for the RCU barrier a veth's does, so
// the macvlan case has a floor of its own: a macvlan on the bench's master
// (lowerName) created directly in the pod namespace, deleted there in this
// process, and deleted by a fresh process that enters the pod namespace and
// sends one RTM_DELLINK (what a macvlan plugin's DEL must do at least).
//
// The floor of the chain case: the same shape (three plugins in one libcni
// conflist) made of a plugin that does nothing (decodes its config, passes
// prevResult on): the exec and start-up of three Go processes and libcni's own
// work between them, none of a plugin's.
const (
	floorGroup  = "kernel floor (netops, no exec)"
	floorSide   = "floor"
	opVethAdd   = "veth create"
	opVethDel   = "veth delete"
	opNftAdd    = "nft element add (open..close)"
	opNftDel    = "nft element delete"
	opNftClose  = "nft socket close after delete"
	opVethExec  = "veth delete by a fresh process (exec + RTM_DELLINK)"
	opChainNop  = "libcni ADD of 3 do-nothing Go plugins"
	opMvAdd     = "macvlan create (in the pod)"
	opMvDel     = "macvlan delete (in the pod)"
	opMvExec    = "macvlan delete by a fresh process (exec + setns + RTM_DELLINK)"
	floorMvName = "mvfloor0"
	floorSubnet = 16
)

var floorOps = []string{opVethAdd, opVethDel, opVethExec, opMvAdd, opMvDel, opMvExec, opNftAdd, opNftDel, opNftClose, opChainNop}

func (b *bench) runFloor() {
	concs := []int{1}
	if m := maxInt(b.o.conc); m > 1 {
		concs = append(concs, m)
	}
	for r := 1; r <= b.o.rounds; r++ {
		for _, conc := range concs {
			if b.stopping.Load() {
				return
			}
			b.floorBatch(conc, fmt.Sprintf("round %d/%d", r, b.o.rounds))
		}
	}
}

type floorPod struct {
	nsName string
	path   string
	host   *netops.Handle
	pod    *netops.Handle
	veth   string
	ip     netip.Addr
}

func (b *bench) floorBatch(conc int, label string) {
	what := fmt.Sprintf("kernel floor %s %s", modeName(conc), label)
	n := b.o.floorN
	pods := make([]*floorPod, 0, n)
	defer func() {
		for _, p := range pods {
			p.host.Close()
			p.pod.Close()
			b.deleteNS(p.nsName)
		}
		time.Sleep(b.o.settle)
	}()
	for i := 0; i < n; i++ {
		name, path, err := b.newNS()
		if err != nil {
			b.fail("%s: create pod namespace: %v", what, err)
			return
		}
		p := &floorPod{nsName: name, path: path, veth: fmt.Sprintf("flr%d", i), ip: netip.AddrFrom4([4]byte{10, 236, byte((i + 2) >> 8), byte(i + 2)})}
		pods = append(pods, p)
		if p.host, err = netops.Open(""); err == nil {
			p.pod, err = netops.Open(path)
		}
		if err != nil {
			b.fail("%s: %v", what, err)
			return
		}
	}
	mode := modeName(conc)
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opVethAdd, floorSide), func(p *floorPod) (*time.Duration, error) {
		_, _, err := p.host.EnsureVeth(netops.VethOpts{HostName: p.veth, PeerName: "eth0", Peer: p.pod})
		return nil, err
	})
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opNftAdd, floorSide), func(p *floorPod) (*time.Duration, error) {
		h, err := netops.Open("")
		if err != nil {
			return nil, err
		}
		err = h.NFT().EnsureMasq("floor", []netip.Prefix{netip.PrefixFrom(p.ip, floorSubnet)})
		if cerr := h.Close(); err == nil {
			err = cerr
		}
		return nil, err
	})
	closeRec := b.sampleFor(floorGroup, mode, opNftClose, floorSide)
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opNftDel, floorSide), func(p *floorPod) (*time.Duration, error) {
		h, err := netops.Open("")
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		err = h.NFT().DeleteMasq([]netip.Addr{p.ip})
		del := time.Since(t0)
		t1 := time.Now()
		cerr := h.Close()
		d := time.Since(t1)
		b.mu.Lock()
		closeRec.lat = append(closeRec.lat, d)
		closeRec.wall += d
		b.mu.Unlock()
		if err == nil {
			err = cerr
		}
		return &del, err
	})
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opVethDel, floorSide), func(p *floorPod) (*time.Duration, error) {
		return nil, p.host.DeleteLink(p.veth)
	})
	if b.vethdel != "" {
		b.floorPhase(what, conc, pods, &sample{}, func(p *floorPod) (*time.Duration, error) {
			_, _, err := p.host.EnsureVeth(netops.VethOpts{HostName: p.veth, PeerName: "eth0", Peer: p.pod})
			return nil, err
		})
		b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opVethExec, floorSide), func(p *floorPod) (*time.Duration, error) {
			if out, err := exec.Command(b.vethdel, p.veth).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("%s %s: %w: %s", b.vethdel, p.veth, err, out)
			}
			return nil, nil
		})
	}
	b.macvlanFloor(what, conc, pods)
	if b.nopcni != "" && conc == 1 {
		b.chainFloor(what, mode, pods)
	}
	if veths, err := nodeVeths(); err != nil || len(veths) > 0 {
		b.fail("%s: veths left: %v %v", what, veths, err)
	}
	if h, err := netops.Open(""); err == nil {
		if ms, err := h.NFT().MasqEntries(); err != nil || len(ms) > 0 {
			b.fail("%s: masquerade elements left: %d %v", what, len(ms), err)
		}
		h.Close()
	}
}

// macvlanFloor times a macvlan's create and delete in each pod, in this
// process and (when the helper was built) by a fresh process.
func (b *bench) macvlanFloor(what string, conc int, pods []*floorPod) {
	if err := b.ensureLower(); err != nil {
		b.fail("%s: %v", what, err)
		return
	}
	mode := modeName(conc)
	create := func(p *floorPod) (*time.Duration, error) {
		_, err := p.host.EnsureMacvlan(netops.SubLinkOpts{Name: floorMvName, Master: lowerName, Into: p.pod})
		return nil, err
	}
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opMvAdd, floorSide), create)
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opMvDel, floorSide), func(p *floorPod) (*time.Duration, error) {
		return nil, p.pod.DeleteLink(floorMvName)
	})
	if b.vethdel == "" {
		return
	}
	b.floorPhase(what, conc, pods, &sample{}, create)
	b.floorPhase(what, conc, pods, b.sampleFor(floorGroup, mode, opMvExec, floorSide), func(p *floorPod) (*time.Duration, error) {
		if out, err := exec.Command(b.vethdel, floorMvName, p.path).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s %s %s: %w: %s", b.vethdel, floorMvName, p.path, err, out)
		}
		return nil, nil
	})
}

// chainFloor times a libcni ADD (then DELs, untimed) of three do-nothing
// plugins for every pod.
func (b *bench) chainFloor(what, mode string, pods []*floorPod) {
	dir := filepath.Join(b.tmp, "nopcni")
	types := []string{"nop-a", "nop-b", "nop-c"}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.fail("%s: %v", what, err)
		return
	}
	for _, t := range types {
		if err := os.Symlink(b.nopcni, filepath.Join(dir, t)); err != nil && !errors.Is(err, fs.ErrExist) {
			b.fail("%s: %v", what, err)
			return
		}
	}
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"nopchain","plugins":[{"type":"nop-a"},{"type":"nop-b"},{"type":"nop-c"}]}`))
	if err != nil {
		b.fail("%s: %v", what, err)
		return
	}
	cn := libcni.NewCNIConfigWithCacheDir([]string{dir}, filepath.Join(b.tmp, "nopcni-cache"), nil)
	b.floorPhase(what, 1, pods, b.sampleFor(floorGroup, mode, opChainNop, floorSide), func(p *floorPod) (*time.Duration, error) {
		rt := &libcni.RuntimeConf{ContainerID: "nop-" + p.nsName, NetNS: p.path, IfName: "eth0"}
		ctx, cancel := opCtx()
		defer cancel()
		t0 := time.Now()
		if _, err := cn.AddNetworkList(ctx, list, rt); err != nil {
			return nil, err
		}
		d := time.Since(t0)
		return &d, cn.DelNetworkList(ctx, list, rt)
	})
}

// floorPhase runs fn for every pod, conc at a time; fn returns the time to
// record (nil: the whole call).
func (b *bench) floorPhase(what string, conc int, pods []*floorPod, rec *sample, fn func(p *floorPod) (*time.Duration, error)) {
	var (
		mu   sync.Mutex
		lats []time.Duration
		nerr int
		last error
		wg   sync.WaitGroup
		next = make(chan *floorPod)
	)
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range next {
				t0 := time.Now()
				took, err := fn(p)
				d := time.Since(t0)
				if took != nil {
					d = *took
				}
				mu.Lock()
				lats = append(lats, d)
				if err != nil {
					nerr++
					last = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range pods {
		next <- p
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	b.mu.Lock()
	rec.lat = append(rec.lat, lats...)
	rec.wall += wall
	rec.errs += nerr
	b.mu.Unlock()
	if nerr > 0 {
		b.fail("%s: %d calls failed, last: %v", what, nerr, last)
	}
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
