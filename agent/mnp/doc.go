// Package mnp enforces MultiNetworkPolicy (k8s.cni.cncf.io/v1beta1,
// k8snetworkplumbingwg/multi-networkpolicy) on the secondary networks cnibox
// attaches: the policies of each network (its NetworkAttachmentDefinition,
// named by the policy's k8s.v1.cni.cncf.io/policy-for annotation) are
// resolved by agent/policy's engine as NetworkPolicies over the pods'
// addresses on that network (their network-status annotation), and each
// pod of the node that one of them isolates gets a table in its own
// network namespace (netops/nft's MultiTable), written whole in one
// transaction by the policy tables' one syncer (agent/policynft), whose
// input the watcher is: its loop, retries and resync are the node
// table's. resolve.go is the pure part; the watcher (watch.go) links
// client-go and is left out of the etcd-only agent (tag nokube).
// docs/policy.md, "MultiNetworkPolicy", has the semantics and the limits.
package mnp
