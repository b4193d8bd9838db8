//go:build !nokube

package podapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/cluster"
	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// Config configures the Kubernetes source.
type Config struct {
	kubeapi.Cluster // its node is the one whose pods the pod API answers for
	// Cache is the agent's informer cache (agent/cluster), which keeps
	// this node's pods' UIDs and annotations; nil: one of its own, run
	// by Run.
	Cache *cluster.Cache
	Log   *slog.Logger
	// Devices answers OpPodDevices (the kubelet's pod-resources API);
	// nil: the op is Unavailable.
	Devices DeviceSource
	// Admit, if set, is called after a pod's network-status is written
	// (not removed), with the status; its error fails the call, and so the
	// multi role's ADD (the MultiNetworkPolicy watcher's, agent/mnp).
	Admit func(ctx context.Context, namespace, name string, status json.RawMessage) error
}

// Kube answers from the agent's informer cache of pods (agent/cluster),
// which keeps the UID and annotations of this node's pods (Pod.Local), and
// from the API server directly for a pod the cache has not seen yet (just
// scheduled) or whose UID differs.
type Kube struct {
	c    rest.Interface
	node string
	log  *slog.Logger
	pods podStore
	// own is the cache NewKube made (no Config.Cache): Run runs it.
	own   *cluster.Cache
	reg   *cluster.Handler // this reader of the cache's pods
	devs  DeviceSource
	admit func(ctx context.Context, namespace, name string, status json.RawMessage) error
}

var (
	_ Source       = (*Kube)(nil)
	_ DeviceSource = (*Kube)(nil)
)

// nadPath is where NetworkAttachmentDefinitions live.
const nadPath = "/apis/k8s.cni.cncf.io/v1/namespaces/%s/network-attachment-definitions/%s"

// podStore is where the pod API looks a pod up (a *cluster.Cache).
type podStore interface {
	Get(kind cluster.Kind, key string) (any, bool)
}

// NewKube builds the client and registers on the cache's pods; Run runs
// until the agent stops. The node name is Config.NodeName, else
// $NODE_NAME, else the hostname.
func NewKube(c Config) (*Kube, error) {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	node, cs, err := c.Connect("pod API", &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		return nil, err
	}
	k := &Kube{c: cs, node: node, log: c.Log, devs: c.Devices, admit: c.Admit}
	if c.Cache == nil {
		c.Cache = cluster.NewWith(cluster.Config{Cluster: kubeapi.Cluster{Kubeconfig: c.Kubeconfig, APIURL: c.APIURL, NodeName: node}, Log: c.Log})
		k.own = c.Cache
	}
	if got := c.Cache.Node(); got != node {
		return nil, fmt.Errorf("pod API: the informer cache keeps the pods of node %q whole, this is node %q", got, node)
	}
	k.pods = c.Cache
	if k.reg, err = c.Cache.Handle(cluster.NodePods, cache.ResourceEventHandlerFuncs{}); err != nil {
		return nil, fmt.Errorf("pod API: %w", err)
	}
	return k, nil
}

// Run reads the cache's pods until ctx ends (and runs the cache, if it
// is the pod API's own).
func (k *Kube) Run(ctx context.Context) {
	k.log.Info("pod API: reading this node's pods from the informer cache", "node", k.node)
	if k.own != nil {
		k.own.Start(ctx)
	}
	<-ctx.Done()
	k.reg.Stop()
}

// HasSynced reports whether the cache has listed the pods once.
func (k *Kube) HasSynced() bool { return k.reg.HasSynced() }

// Pod returns the pod from the informer cache, or from the API server
// when the cache does not have it (or has another pod of that name).
func (k *Kube) Pod(ctx context.Context, namespace, name, uid string) (*agentapi.Pod, error) {
	if obj, ok := k.pods.Get(cluster.NodePods, namespace+"/"+name); ok {
		if p, ok := obj.(*cluster.Pod); ok && p.Local != nil && p.Node == k.node && (uid == "" || p.Local.UID == uid) {
			return &agentapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.Local.UID, NodeName: p.Node, Annotations: maps.Clone(p.Local.Annotations)}, nil
		}
	}
	p := &kubeapi.Pod{}
	if err := kubeapi.Get(ctx, k.c, podRef(namespace, name), p); err != nil {
		return nil, k.apiErr(err, "pod %s/%s", namespace, name)
	}
	if uid != "" && string(p.UID) != uid {
		return nil, &agentapi.Error{Reason: agentapi.ReasonNotFound,
			Msg: fmt.Sprintf("pod %s/%s has UID %s, not %s (K8S_POD_UID): the pod was deleted and created again", namespace, name, p.UID, uid)}
	}
	if p.Spec.NodeName != k.node {
		return nil, &agentapi.Error{Reason: agentapi.ReasonNotFound,
			Msg: fmt.Sprintf("pod %s/%s runs on node %q, not on this node %q: the pod API answers for this node's pods only", namespace, name, p.Spec.NodeName, k.node)}
	}
	return apiPod(p), nil
}

// podRef names a pod.
func podRef(namespace, name string) kubeapi.Ref {
	return kubeapi.Ref{Resource: "pods", Namespace: namespace, Name: name}
}

func apiPod(p *kubeapi.Pod) *agentapi.Pod {
	return &agentapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), NodeName: p.Spec.NodeName, Annotations: p.Annotations}
}

// NetAttachDef reads a NetworkAttachmentDefinition from the API server. A
// missing CRD is NotFound too.
func (k *Kube) NetAttachDef(ctx context.Context, namespace, name string) (*agentapi.NetAttachDef, error) {
	b, err := k.c.Get().AbsPath(fmt.Sprintf(nadPath, namespace, name)).DoRaw(ctx)
	if err != nil {
		return nil, k.apiErr(err, "network-attachment-definition %s/%s", namespace, name)
	}
	var nad struct {
		Metadata struct {
			Namespace   string            `json:"namespace"`
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Config string `json:"config"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &nad); err != nil {
		return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("network-attachment-definition %s/%s: decode: %v", namespace, name, err)}
	}
	return &agentapi.NetAttachDef{Namespace: nad.Metadata.Namespace, Name: nad.Metadata.Name, Config: nad.Spec.Config,
		ResourceName: nad.Metadata.Annotations[agentapi.ResourceNameAnnotation]}, nil
}

// SetNetworkStatus writes (or with an empty status removes) the pod's
// network-status annotation with a merge patch; a UID, when given, is a
// precondition of the patch.
func (k *Kube) SetNetworkStatus(ctx context.Context, namespace, name, uid string, status json.RawMessage) error {
	if _, err := k.Pod(ctx, namespace, name, uid); err != nil {
		return err // not this node's pod, or none
	}
	var value any // nil removes the annotation
	if len(status) > 0 && string(status) != "null" {
		value = string(status)
	}
	meta := map[string]any{"annotations": map[string]any{agentapi.NetworkStatusAnnotation: value}}
	if uid != "" {
		meta["uid"] = uid
	}
	if err := kubeapi.PatchMetadata(ctx, k.c, podRef(namespace, name), meta); err != nil {
		return k.apiErr(err, "annotate pod %s/%s", namespace, name)
	}
	if k.admit != nil && value != nil {
		if err := k.admit(ctx, namespace, name, status); err != nil {
			return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: err.Error()}
		}
	}
	return nil
}

// apiErr maps an API error to the pod API's reasons.
func (k *Kube) apiErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case apierrors.IsNotFound(err):
		return &agentapi.Error{Reason: agentapi.ReasonNotFound, Msg: fmt.Sprintf("%s: not found", what)}
	case apierrors.IsConflict(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return &agentapi.Error{Reason: agentapi.ReasonBadRequest, Msg: fmt.Sprintf("%s: %v", what, err)}
	case errors.Is(err, context.DeadlineExceeded):
		return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("%s: the API server did not answer in %s", what, callTimeout)}
	}
	return &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: fmt.Sprintf("%s: %v", what, err)}
}

// WaitSynced waits up to d for the cache's first list of the pods; it reports
// whether it synced (the API answers for pods it has not seen anyway).
func (k *Kube) WaitSynced(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), k.reg.HasSynced)
}

// PodDevices answers from Config.Devices (handleMultus has checked that
// the pod is this node's).
func (k *Kube) PodDevices(ctx context.Context, namespace, name, uid string) (map[string][]string, error) {
	if k.devs == nil {
		return nil, &agentapi.Error{Reason: agentapi.ReasonUnavailable, Msg: "this agent does not read the kubelet's pod-resources API"}
	}
	return k.devs.PodDevices(ctx, namespace, name, uid)
}

// Events records events on the pod, as Multus' event recorder does
// (source component "multus", so that what watches Multus' events finds
// them).
func (k *Kube) Events(ctx context.Context, namespace, name, uid string, events []agentapi.Event) error {
	p, err := k.Pod(ctx, namespace, name, uid)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339)
	var errs []error
	for _, e := range events {
		ev := map[string]any{
			"apiVersion": "v1", "kind": "Event",
			"metadata":       map[string]any{"generateName": name + ".", "namespace": namespace},
			"involvedObject": map[string]any{"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": p.UID},
			"type":           e.Type, "reason": e.Reason, "message": e.Message,
			"source":         map[string]any{"component": "multus", "host": k.node},
			"firstTimestamp": now, "lastTimestamp": now, "count": 1,
		}
		b, _ := json.Marshal(ev)
		if _, err := k.c.Post().AbsPath("/api/v1/namespaces/" + namespace + "/events").Body(b).DoRaw(ctx); err != nil {
			errs = append(errs, k.apiErr(err, "event %s on pod %s/%s", e.Reason, namespace, name))
		}
	}
	return errors.Join(errs...)
}
