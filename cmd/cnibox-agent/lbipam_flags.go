package main

import (
	"flag"
	"fmt"
	"time"
)

// lbIPAMFlags configure the LoadBalancer IPAM (agent/lbipam,
// docs/loadbalancer.md).
type lbIPAMFlags struct {
	on        bool
	namespace string
	renew     time.Duration

	announce   bool   // --lb-announce
	announceNS string // --lb-announce-namespace
}

func (l *lbIPAMFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.on, "lb-ipam", false, "kube: give Services of type LoadBalancer (spec.loadBalancerClass unset or cnibox.io/lb) addresses from the LoadBalancerIPPools "+
		"(deploy/kubernetes/loadbalancerippool-crd.yaml): one agent of the cluster at a time, elected on the Lease cnibox-lb-ipam (docs/loadbalancer.md) (cnibox)")
	fs.StringVar(&l.namespace, "lb-ipam-namespace", "kube-system", "kube, with --lb-ipam: the namespace of the Lease cnibox-lb-ipam (cnibox)")
	fs.DurationVar(&l.renew, "lb-ipam-renew", 2*time.Second, "kube, with --lb-ipam: how often the allocating agent renews its Lease, which lasts three times that: "+
		"another agent takes over that long after the holder died (cnibox)")
	fs.BoolVar(&l.announce, "lb-announce", false, "kube, with --kube-subnet-mgr: answer on the LAN (ARP for IPv4, NDP for IPv6) for the LoadBalancerIPPools' addresses the Services hold: "+
		"one node at a time per address, elected on a Lease cnibox-lb-<address> among the nodes the pool's spec.announce.nodeSelector selects whose uplink network contains it "+
		"(with a ready endpoint for externalTrafficPolicy Local) (docs/loadbalancer.md) (cnibox)")
	fs.StringVar(&l.announceNS, "lb-announce-namespace", "cnibox-egress", "kube, with --lb-announce: the namespace of the Leases cnibox-lb-<address> (cnibox)")
}

// validate checks the flags.
func (l *lbIPAMFlags) validate() error {
	if l.renew < 100*time.Millisecond {
		return fmt.Errorf("--lb-ipam-renew %s: use at least 100ms, e.g. 2s", l.renew)
	}
	if l.announce && l.announceNS == "" {
		return fmt.Errorf("--lb-announce-namespace is empty: name the Leases' namespace, e.g. cnibox-egress")
	}
	if l.namespace == "" {
		return fmt.Errorf("--lb-ipam-namespace is empty: name the Lease's namespace, e.g. kube-system")
	}
	return nil
}
