//go:build !nokube

package podapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/agent/kubeapi"
	"github.com/cnibox/cnibox/internal/agentapi"
)

// Config configures the Kubernetes source.
type Config struct {
	kubeapi.Cluster // its node is the one whose pods the informer watches
	Log             *slog.Logger
	// Devices answers OpPodDevices (the kubelet's pod-resources API);
	// nil: the op is Unavailable.
	Devices DeviceSource
	// Admit, if set, is called after a pod's network-status is written
	// (not removed), with the status; its error fails the call, and so the
	// multi role's ADD (the MultiNetworkPolicy watcher's, agent/mnp).
	Admit func(ctx context.Context, namespace, name string, status json.RawMessage) error
}

// Kube answers from a pod informer restricted to this node
// (spec.nodeName=<node>), and from the API server directly for a pod the
// informer has not seen yet (just scheduled) or whose UID differs.
type Kube struct {
	c     rest.Interface
	node  string
	log   *slog.Logger
	store cache.Store
	ctrl  cache.Controller
	devs  DeviceSource
	admit func(ctx context.Context, namespace, name string, status json.RawMessage) error
}

var (
	_ Source       = (*Kube)(nil)
	_ DeviceSource = (*Kube)(nil)
)

// nadPath is where NetworkAttachmentDefinitions live.
const nadPath = "/apis/k8s.cni.cncf.io/v1/namespaces/%s/network-attachment-definitions/%s"

// NewKube builds the client and the informer; Run starts the informer. The
// node name is Config.NodeName, else $NODE_NAME, else the hostname.
func NewKube(c Config) (*Kube, error) {
	if c.Log == nil {
		c.Log = slog.Default()
	}
	node, cs, err := c.Connect("pod API", &kubeapi.Pod{}, &kubeapi.PodList{})
	if err != nil {
		return nil, err
	}
	k := &Kube{c: cs, node: node, log: c.Log, devs: c.Devices, admit: c.Admit}
	sel := fields.OneTermEqualSelector("spec.nodeName", node)
	k.store, k.ctrl = kubeapi.NewInformer(cs, "pods", sel, &kubeapi.Pod{}, cache.InformerOptions{
		Handler: cache.ResourceEventHandlerFuncs{},
		// managedFields are most of a pod's metadata and never read here.
		Transform: func(obj any) (any, error) {
			if p, ok := obj.(*kubeapi.Pod); ok {
				p.ManagedFields = nil
			}
			return obj, nil
		},
	})
	return k, nil
}

// Run runs the informer until ctx ends.
func (k *Kube) Run(ctx context.Context) {
	k.log.Info("pod API: watching the pods of this node", "node", k.node)
	k.ctrl.Run(ctx.Done())
}

// HasSynced reports whether the informer has listed the node's pods once.
func (k *Kube) HasSynced() bool { return k.ctrl.HasSynced() }

// Pod returns the pod from the informer's cache, or from the API server
// when the cache does not have it (or has another pod of that name).
func (k *Kube) Pod(ctx context.Context, namespace, name, uid string) (*agentapi.Pod, error) {
	if obj, ok, _ := k.store.GetByKey(namespace + "/" + name); ok {
		if p, ok := obj.(*kubeapi.Pod); ok && (uid == "" || string(p.UID) == uid) {
			return apiPod(p), nil
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

// WaitSynced waits up to d for the informer's first list; it reports
// whether it synced (the API answers for pods it has not seen anyway).
func (k *Kube) WaitSynced(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), k.ctrl.HasSynced)
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
