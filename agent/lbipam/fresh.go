//go:build !nokube

package lbipam

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnibox/cnibox/agent/kubeapi"
)

// The controller reads the Services from the agent's informer cache, which
// runs all along where the Services proxy runs: a watch that lags (one
// that broke and is listing again) could still show a Service as it was
// before the last leader's final writes. So a new leader lists the
// Services once from the API server (a consistent read, page by page)
// before its first plan, and takes of each Service the newer of that and
// what the cache holds (c.written, as for its own writes): the
// allocations it rebuilds are the last leader's. A Service the list has
// and the cache not yet comes with the cache's next event; one the cache
// holds and the list not (deleted since) keeps its addresses until the
// cache sees it go: both wait, neither hands an address out twice.

// listServices lists the Services into c.written.
func (c *controller) listServices(ctx context.Context) error {
	fresh := map[string]*svcObj{}
	_, err := kubeapi.ListPages(metav1.ListOptions{}, func(opts metav1.ListOptions) (metav1.ListMeta, error) {
		var l corev1.ServiceList
		err := c.core.Get().Resource("services").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(&l)
		for i := range l.Items {
			s := serviceOf(&l.Items[i])
			fresh[s.Key()] = s
		}
		return l.ListMeta, err
	})
	if err != nil {
		return err
	}
	for k, s := range fresh {
		if w := c.written[k]; w == nil || w.UID != s.UID || newer(s.ResourceVersion, w.ResourceVersion) {
			c.written[k] = s
		}
	}
	return nil
}
