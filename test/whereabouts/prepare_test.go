//go:build !kube

package whereabouts

// prepare: the etcd test needs nothing from outside.
func prepare() {}
