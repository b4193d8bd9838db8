// Package cluster is cnibox-agent's one informer cache of the cluster's
// pods, namespaces and nodes, and of its Services and EndpointSlices
// (services.go): every part of the agent that reads them (the
// NetworkPolicy watcher, MultiNetworkPolicy, egress gateways, the pod API,
// the cluster IPAM's reclaim, the overlay's peers, the Services proxy,
// the domainNames resolvers, the LoadBalancer IPAM) registers its handler
// on the same shared informer of each kind,
// so the API server sees one list and one watch of each, and the agent
// holds one slim copy of each object (objects.go), made once at the
// informer's transform (slim.go), whatever the number of readers. An
// informer runs from its first reader to its last (the reclaim reads the
// pods only while its agent leads). The pod API reads its node's pods
// (NodePods): from the informer of every pod where one runs anyway
// (Config.ClusterPods), else from one of the node's pods alone.
//
// Pod is the agent's one pod type: what any of those readers reads of a
// pod, a few hundred bytes where the API object is kilobytes, its strings
// and labels shared with the pods that have the same (intern.go). The pod
// API's part (the UID and every annotation: Pod.Local) is kept for the
// pods of this node only (Config's NodeName), so that it costs a node's
// pods, not the cluster's: a nil pointer elsewhere (BenchmarkPodMemory:
// 297 B a pod held, 279 without the field, a size class up).
// Of a Node it keeps besides the annotations the overlay's lease reads
// (Config.NodeAnnotations); of a Service, the LoadBalancer IPAM's part
// (Config.LoadBalancer), which that package makes, on an agent that runs
// it.
//
// The cache (cache.go) links client-go and is left out of the etcd-only
// agent (tag nokube); the types and their transform need k8s.io/api only.
// Only cnibox-agent's Kubernetes features import it.
package cluster
