package store

import (
	"fmt"
	"time"
)

// nodeViews hold the one record of a bucket in which cnibox-agent keeps
// its view of the node for `cnibox inspect` (the egress gateways', the
// load balancers'), under the bucket's name as its key. P is *T, which
// names the node and stamps the record.
type nodeViews[T any, P interface {
	*T
	stamp() (node string, updated *time.Time)
}] struct{ records[T] }

// put records st, replacing the previous one; its Updated is set to now.
func (r nodeViews[T, P]) put(s *Store, st T) error {
	node, updated := P(&st).stamp()
	if node == "" {
		return fmt.Errorf("store: %s needs the node's name", r.what)
	}
	*updated = time.Now()
	return r.putKey(s, r.bucket, string(r.bucket), st)
}

// get returns the recorded view; found is false when there is none.
func (r nodeViews[T, P]) get(s *Store) (st T, found bool, err error) {
	return r.getKey(s, r.bucket)
}
