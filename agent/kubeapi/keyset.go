package kubeapi

import (
	"context"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// RunKeySet runs, until ctx ends, a reflector of the metadata of gvr's
// objects in every namespace (MetaListWatch, SlimMeta) into a KeySet, and
// returns the set; name names the reflector in client-go's logs.
func RunKeySet(ctx context.Context, mc metadata.Interface, gvr schema.GroupVersionResource, name string) *KeySet {
	s := &KeySet{keys: map[string]struct{}{}}
	r := cache.NewReflectorWithOptions(MetaListWatch(mc, gvr, "", SlimMeta), &metav1.PartialObjectMetadata{}, s, cache.ReflectorOptions{Name: name})
	go r.RunWithContext(ctx)
	return s
}

// KeySet is a reflector's store that keeps the keys ("namespace/name") of
// the objects and drops the objects, for a client that only asks whether
// an object exists: at 150,000 pods an informer's store of slim
// PartialObjectMetadata held 484 B a pod. It is a TransformingStore, so the
// reflector's streaming list (client-go's WatchList) slims the objects it
// holds until the list is complete.
type KeySet struct {
	mu     sync.RWMutex
	keys   map[string]struct{}
	synced atomic.Bool // a list has been stored
}

var _ cache.TransformingStore = (*KeySet)(nil)

// Has reports whether the object key ("namespace/name") exists.
func (s *KeySet) Has(key string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.keys[key]
	return ok
}

// Synced reports whether a list has been stored.
func (s *KeySet) Synced() bool { return s.synced.Load() }

// Add, Update, Delete, Replace and Resync are the reflector's.
func (s *KeySet) Add(obj any) error {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.keys[k] = struct{}{}
	s.mu.Unlock()
	return nil
}

func (s *KeySet) Update(obj any) error { return s.Add(obj) }

func (s *KeySet) Delete(obj any) error {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
	return nil
}

// Replace sets the keys to the list's.
func (s *KeySet) Replace(list []any, _ string) error {
	keys := make(map[string]struct{}, len(list))
	for _, obj := range list {
		k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return err
		}
		keys[k] = struct{}{}
	}
	s.mu.Lock()
	s.keys = keys
	s.mu.Unlock()
	s.synced.Store(true)
	return nil
}

func (s *KeySet) Resync() error { return nil }

// Transformer slims what the reflector holds before it reaches the store.
func (s *KeySet) Transformer() cache.TransformFunc { return SlimMetaTransform }
