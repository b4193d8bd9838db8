//go:build kube

package node

import "os"

// deployNetwork applies the network's manifest (its DaemonSet ds in
// namespace ns) on the cluster, waits until every node is Ready and the
// DaemonSet rolled out, routes the pod networks from the control plane's
// namespace (routePods), then runs CoreDNS (testdata/coredns.yaml): the
// cluster TestKubeConformance runs its specs on and the soak
// (TestSoakCluster) churns.
func (c *cluster) deployNetwork(what, manifest, ns, ds string) {
	t := c.t
	t.Helper()
	step(t, what+": the network, then CoreDNS", func() {
		c.apply(manifest)
		c.must("wait", "--for=condition=Ready", "node", "--all", c.timeout())
		c.must("-n", ns, "rollout", "status", "ds/"+ds, c.timeout())
		c.routePods()
		coredns, err := os.ReadFile("testdata/coredns.yaml")
		if err != nil {
			t.Fatal(err)
		}
		c.apply(string(coredns))
		c.must("-n", "kube-system", "rollout", "status", "deploy/coredns", c.timeout())
	})
}
