// Package kubeapi is what cnibox-agent's two Kubernetes clients, the kube
// lease backend (Nodes) and the pod API (Pods), share above the REST client
// of internal/kubecore: how they connect (Cluster), the few fields of the
// objects they decode (objects.go), and the requests they make: get one
// object, merge-patch its metadata, run an informer.
//
// It links client-go: only cnibox-agent imports it.
package kubeapi

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/cnibox/cnibox/internal/kubecore"
)

// Cluster says how to reach the API server and which node this is
// (--kubeconfig-file, --kube-api-url, --node-name).
type Cluster struct {
	Kubeconfig string // "" = in-cluster
	APIURL     string // overrides the kubeconfig's server
	NodeName   string // this node; "" = $NODE_NAME, else the hostname
}

// Connect returns this node's name and a client of the core/v1 API that
// decodes the given types; what prefixes the errors.
func (c Cluster) Connect(what string, types ...runtime.Object) (node string, client rest.Interface, err error) {
	if node, err = kubecore.NodeName(c.NodeName, what); err != nil {
		return "", nil, err
	}
	cs, err := kubecore.Connect(c.APIURL, c.Kubeconfig, what, types...)
	if err != nil {
		return "", nil, err
	}
	return node, cs, nil
}

// Config is the client configuration (for clients other than Connect's, like
// client-go's metadata client); what prefixes the errors.
func (c Cluster) Config(what string) (*rest.Config, error) {
	return kubecore.Config(c.APIURL, c.Kubeconfig, what)
}

// Protobuf is rc asking for protobuf: every pod of the cluster is listed
// at the start, and a pod's JSON is larger and decodes into more garbage
// (managed fields copied, reflection). Custom resources (a
// ClusterNetworkPolicy) have no protobuf: their clients keep rc.
func Protobuf(rc *rest.Config) *rest.Config {
	pb := *rc
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return &pb
}

// Ref names one object: Namespace is "" for a cluster-scoped resource
// (nodes).
type Ref struct {
	Resource, Namespace, Name string
}

// on points req at the object.
func (r Ref) on(req *rest.Request) *rest.Request {
	if r.Namespace != "" {
		req = req.Namespace(r.Namespace)
	}
	return req.Resource(r.Resource).Name(r.Name)
}

// Get reads the object into obj.
func Get(ctx context.Context, c rest.Interface, r Ref, obj runtime.Object) error {
	return r.on(c.Get()).Do(ctx).Into(obj)
}

// PatchMetadata merge-patches the object's metadata with meta (for example
// {"annotations": {...}}; a nil value removes a key).
func PatchMetadata(ctx context.Context, c rest.Interface, r Ref, meta map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return r.on(c.Patch(types.MergePatchType)).Body(patch).Do(ctx).Error()
}

// PatchStatusMetadata is PatchMetadata through the object's status
// subresource, as flanneld annotates its node: flannel's ClusterRole grants
// patch on nodes/status, not on nodes.
func PatchStatusMetadata(ctx context.Context, c rest.Interface, r Ref, meta map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	return r.on(c.Patch(types.MergePatchType)).SubResource("status").Body(patch).Do(ctx).Error()
}

// PatchStatusMerge JSON-merge-patches the object's status subresource
// with status (a custom resource has no strategic merge: a list in status
// is replaced whole).
func PatchStatusMerge(ctx context.Context, c rest.Interface, r Ref, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return r.on(c.Patch(types.MergePatchType)).SubResource("status").Body(patch).Do(ctx).Error()
}

// PatchStatus strategic-merge-patches the object's status subresource with
// status (for a Node's conditions: merged by type).
func PatchStatus(ctx context.Context, c rest.Interface, r Ref, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	return r.on(c.Patch(types.StrategicMergePatchType)).SubResource("status").Body(patch).Do(ctx).Error()
}
