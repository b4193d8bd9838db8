//go:build !nokube

package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sort"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/cnibox/cnibox/internal/kubecore"
	"github.com/cnibox/cnibox/internal/wbpool"
)

// Kube keeps the pools in whereabouts' CRDs in one namespace (whereabouts'
// default: kube-system). IPPools are read from an informer's cache and from
// the last version this agent wrote, whichever is newer; writes are updates
// on the resourceVersion read.
type Kube struct {
	rc        *rest.Config
	c         rest.Interface
	namespace string
	log       *slog.Logger
	store     cache.Store
	ctrl      cache.Controller

	mu     sync.Mutex
	latest map[string]*ipPool // what this agent last wrote or read fresh
}

var _ Backend = (*Kube)(nil)

// NewKube returns the backend on rc (the agent's client configuration);
// Run starts its informer.
func NewKube(rc *rest.Config, namespace string, log *slog.Logger) (*Kube, error) {
	c, err := restClient(rc)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	k := &Kube{rc: rc, c: c, namespace: namespace, log: log, latest: map[string]*ipPool{}}
	k.store, k.ctrl = cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.NewListWatchFromClient(c, "ippools", namespace, fields.Everything()),
		ObjectType:    &ipPool{},
		Handler:       cache.ResourceEventHandlerFuncs{},
	})
	return k, nil
}

// restClient is a REST client of whereabouts.cni.cncf.io/v1alpha1.
func restClient(rc *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	addTypes(scheme)
	c := *rc
	if c.UserAgent == "" {
		c.UserAgent = "cnibox-agent"
	}
	if c.QPS == 0 {
		c.QPS, c.Burst = 100, 200 // a node's ADDs come in bursts
	}
	out, err := kubecore.RESTClient(&c, groupVersion, "/apis", scheme)
	if err != nil {
		return nil, fmt.Errorf("cluster IPAM: %w", err)
	}
	return out, nil
}

// Run runs the informer until ctx ends.
func (k *Kube) Run(ctx context.Context) { k.ctrl.Run(ctx.Done()) }

// Ready reports whether the informer has listed the pools (so the CRD is
// installed and the API answers).
func (k *Kube) Ready(ctx context.Context) error {
	if !k.ctrl.HasSynced() {
		return fmt.Errorf("the IPPool informer (namespace %s) has not listed the pools yet: is the API server reachable and the CRD ippools.whereabouts.cni.cncf.io installed?", k.namespace)
	}
	return nil
}

// req is a request on one of whereabouts' resources, bounded by
// CallTimeout (an API server that stopped answering fails the call).
func (k *Kube) req(r *rest.Request, resource, name string) *rest.Request {
	r = r.Namespace(k.namespace).Resource(resource).Timeout(CallTimeout)
	if name != "" {
		r = r.Name(name)
	}
	return r
}

// kerr maps API errors to the backend's.
func kerr(err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %v", ErrExists, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("the API server did not answer in %v: %w", CallTimeout, err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("the API server did not answer: %w", err)
	}
	return err
}

// newer reports whether a's resourceVersion is after b's (they are etcd
// revisions in practice; anything else counts as newer).
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return a != b
	}
	return x > y
}

func (k *Kube) remember(o *ipPool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if have, ok := k.latest[o.Name]; !ok || newer(o.ResourceVersion, have.ResourceVersion) {
		k.latest[o.Name] = o
	}
}

// GetPool reads the pool: fresh from the API, or the newest of the
// informer's copy and the last one this agent saw.
func (k *Kube) GetPool(ctx context.Context, name string, fresh bool) (*Pool, error) {
	if !fresh {
		if o := k.cached(name); o != nil {
			return toPool(o), nil
		}
	}
	o := &ipPool{}
	if err := k.req(k.c.Get(), "ippools", name).Do(ctx).Into(o); err != nil {
		return nil, kerr(err)
	}
	k.remember(o)
	return toPool(o), nil
}

// cached is the newest of the informer's copy of the pool and the last one
// this agent saw (nil: neither has it).
func (k *Kube) cached(name string) *ipPool {
	k.mu.Lock()
	mine := k.latest[name]
	k.mu.Unlock()
	var cached *ipPool
	if obj, ok, _ := k.store.GetByKey(k.namespace + "/" + name); ok {
		cached, _ = obj.(*ipPool)
	}
	if cached != nil && (mine == nil || newer(cached.ResourceVersion, mine.ResourceVersion)) {
		return cached
	}
	return mine
}

// CachedPool reads the pool from the cache alone (nil: there is none);
// false until the informer has listed the pools.
func (k *Kube) CachedPool(name string) (*Pool, bool) {
	if !k.ctrl.HasSynced() {
		return nil, false
	}
	if o := k.cached(name); o != nil {
		return toPool(o), true
	}
	return nil, true
}

func toPool(o *ipPool) *Pool {
	p := &Pool{Name: o.Name, Range: o.Spec.Range, Allocations: o.Spec.Allocations, Version: o.ResourceVersion}
	if s := o.Annotations[stickyAnnotation]; s != "" {
		_ = json.Unmarshal([]byte(s), &p.Sticky)
	}
	return p.clone()
}

func (k *Kube) fromPool(p *Pool) *ipPool {
	o := &ipPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupVersion.String(), Kind: "IPPool"},
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: k.namespace, ResourceVersion: p.Version},
		Spec:       ipPoolSpec{Range: p.Range, Allocations: p.Allocations},
	}
	if o.Spec.Allocations == nil {
		o.Spec.Allocations = map[string]wbpool.Allocation{}
	}
	if len(p.Sticky) > 0 {
		b, _ := json.Marshal(p.Sticky)
		o.Annotations = map[string]string{stickyAnnotation: string(b)}
	}
	return o
}

// CreatePool creates the pool (ErrExists when another writer did first).
func (k *Kube) CreatePool(ctx context.Context, p *Pool) error {
	o := &ipPool{}
	err := k.req(k.c.Post(), "ippools", "").Body(k.fromPool(p)).Do(ctx).Into(o)
	if err == nil {
		k.remember(o)
	}
	return kerr(err)
}

// UpdatePool writes p on the resourceVersion it was read at (ErrConflict
// when the pool changed since). Annotations other than cnibox's are kept
// as they were read... the update replaces the object, so it starts from
// the copy that was read.
func (k *Kube) UpdatePool(ctx context.Context, p *Pool) (*Pool, error) {
	body := k.fromPool(p)
	k.mu.Lock()
	if have := k.latest[p.Name]; have != nil && have.ResourceVersion == p.Version {
		keepMeta(body, have)
	} else if obj, ok, _ := k.store.GetByKey(k.namespace + "/" + p.Name); ok {
		if c, _ := obj.(*ipPool); c != nil && c.ResourceVersion == p.Version {
			keepMeta(body, c)
		}
	}
	k.mu.Unlock()
	o := &ipPool{}
	if err := k.req(k.c.Put(), "ippools", p.Name).Body(body).Do(ctx).Into(o); err != nil {
		return nil, kerr(err)
	}
	k.remember(o)
	return toPool(o), nil
}

// keepMeta carries the read object's labels, annotations and owners into
// the update, so that a write of cnibox's keeps what others put there.
func keepMeta(body, read *ipPool) {
	ann := map[string]string{}
	for k, v := range read.Annotations {
		ann[k] = v
	}
	delete(ann, stickyAnnotation)
	if s, ok := body.Annotations[stickyAnnotation]; ok {
		ann[stickyAnnotation] = s
	}
	body.Annotations = ann
	body.Labels = read.Labels
	body.OwnerReferences = read.OwnerReferences
	body.Finalizers = read.Finalizers
}

// ListPools lists the namespace's pools from the API.
func (k *Kube) ListPools(ctx context.Context) ([]*Pool, error) {
	l := &ipPoolList{}
	if err := k.req(k.c.Get(), "ippools", "").Do(ctx).Into(l); err != nil {
		return nil, kerr(err)
	}
	out := make([]*Pool, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toPool(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GetReservation reads an OverlappingRangeIPReservation.
func (k *Kube) GetReservation(ctx context.Context, name string) (*Reservation, error) {
	o := &reservation{}
	if err := k.req(k.c.Get(), "overlappingrangeipreservations", name).Do(ctx).Into(o); err != nil {
		return nil, kerr(err)
	}
	return &o.Spec, nil
}

// CreateReservation creates an OverlappingRangeIPReservation (ErrExists
// when the address is reserved already).
func (k *Kube) CreateReservation(ctx context.Context, name string, r Reservation) error {
	o := &reservation{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupVersion.String(), Kind: "OverlappingRangeIPReservation"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.namespace},
		Spec:       r,
	}
	return kerr(k.req(k.c.Post(), "overlappingrangeipreservations", "").Body(o).Do(ctx).Error())
}

// DeleteReservation deletes one; a missing one is fine.
func (k *Kube) DeleteReservation(ctx context.Context, name string) error {
	err := kerr(k.req(k.c.Delete(), "overlappingrangeipreservations", name).Do(ctx).Error())
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ListReservations lists the OverlappingRangeIPReservations.
func (k *Kube) ListReservations(ctx context.Context) (map[string]Reservation, error) {
	l := &reservationList{}
	if err := k.req(k.c.Get(), "overlappingrangeipreservations", "").Do(ctx).Into(l); err != nil {
		return nil, kerr(err)
	}
	out := map[string]Reservation{}
	for _, o := range l.Items {
		out[o.Name] = o.Spec
	}
	return out, nil
}

func toSlicePool(o *nodeSlicePool) *SlicePool {
	return &SlicePool{Name: o.Name, Range: o.Spec.Range, SliceSize: o.Spec.SliceSize, Slices: append([]Slice(nil), o.Status.Allocations...), Version: o.ResourceVersion}
}

func (k *Kube) fromSlicePool(s *SlicePool) *nodeSlicePool {
	o := &nodeSlicePool{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupVersion.String(), Kind: "NodeSlicePool"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: k.namespace, ResourceVersion: s.Version},
	}
	o.Spec.Range, o.Spec.SliceSize = s.Range, s.SliceSize
	o.Status.Allocations = s.Slices
	if o.Status.Allocations == nil {
		o.Status.Allocations = []Slice{}
	}
	return o
}

// GetSlicePool reads a NodeSlicePool.
func (k *Kube) GetSlicePool(ctx context.Context, name string) (*SlicePool, error) {
	o := &nodeSlicePool{}
	if err := k.req(k.c.Get(), "nodeslicepools", name).Do(ctx).Into(o); err != nil {
		return nil, kerr(err)
	}
	return toSlicePool(o), nil
}

// CreateSlicePool creates a NodeSlicePool.
func (k *Kube) CreateSlicePool(ctx context.Context, s *SlicePool) error {
	return kerr(k.req(k.c.Post(), "nodeslicepools", "").Body(k.fromSlicePool(s)).Do(ctx).Error())
}

// UpdateSlicePool writes a NodeSlicePool on the version read (its status is
// no subresource in whereabouts' CRD).
func (k *Kube) UpdateSlicePool(ctx context.Context, s *SlicePool) error {
	return kerr(k.req(k.c.Put(), "nodeslicepools", s.Name).Body(k.fromSlicePool(s)).Do(ctx).Error())
}

// ListSlicePools lists the NodeSlicePools; without the CRD there are none.
func (k *Kube) ListSlicePools(ctx context.Context) ([]*SlicePool, error) {
	l := &nodeSlicePoolList{}
	err := kerr(k.req(k.c.Get(), "nodeslicepools", "").Do(ctx).Into(l))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]*SlicePool, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, toSlicePool(&l.Items[i]))
	}
	return out, nil
}
