package clusteripam

import (
	"context"
	"errors"
	"time"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// The backends' errors, matched with errors.Is.
var (
	// ErrNotFound: no such object.
	ErrNotFound = errors.New("not found")
	// ErrExists: the object exists already (a create lost a race).
	ErrExists = errors.New("already exists")
	// ErrConflict: the object changed since it was read.
	ErrConflict = errors.New("changed since it was read")
)

// CallTimeout bounds one call to the API server or etcd. A store that does
// not answer fails the call after it (ADD answers "try again later", DEL is
// queued) instead of holding the runtime until its own deadline; a busy
// pool's batch makes many calls, each with this bound.
const CallTimeout = 15 * time.Second

// Pool is an IPPool: its range, its allocations keyed by offset, and the
// version it was read at (empty for a new pool).
type Pool struct {
	Name        string
	Range       string
	Allocations map[string]wbpool.Allocation
	Version     string
	// Sticky remembers, per offset, the podref/ifname that held it last
	// (an annotation whereabouts neither reads nor changes).
	Sticky map[string]string
}

// clone copies p deeply enough to change its maps.
func (p *Pool) clone() *Pool {
	out := *p
	out.Allocations = make(map[string]wbpool.Allocation, len(p.Allocations)+1)
	for k, v := range p.Allocations {
		out.Allocations[k] = v
	}
	out.Sticky = make(map[string]string, len(p.Sticky))
	for k, v := range p.Sticky {
		out.Sticky[k] = v
	}
	return &out
}

// Reservation is an OverlappingRangeIPReservation's spec.
type Reservation struct {
	ContainerID string `json:"containerid,omitempty"`
	PodRef      string `json:"podref"`
	IfName      string `json:"ifname,omitempty"`
}

// SlicePool is a NodeSlicePool: the range, the slice size and which node
// holds which slice ("" = free), in slice order.
type SlicePool struct {
	Name      string
	Range     string
	SliceSize string
	Slices    []Slice
	Version   string
}

// Slice is one slice of a SlicePool.
type Slice struct {
	Range string `json:"sliceRange"`
	Node  string `json:"nodeName"`
}

// Backend is where the pools live: the Kubernetes API (whereabouts' CRDs)
// or etcd. Pool reads may come from a cache (fresh=false); writes carry the
// version read and fail with ErrConflict when the object moved on.
type Backend interface {
	GetPool(ctx context.Context, name string, fresh bool) (*Pool, error)
	CreatePool(ctx context.Context, p *Pool) error
	UpdatePool(ctx context.Context, p *Pool) (*Pool, error)
	ListPools(ctx context.Context) ([]*Pool, error)

	GetReservation(ctx context.Context, name string) (*Reservation, error)
	CreateReservation(ctx context.Context, name string, r Reservation) error
	DeleteReservation(ctx context.Context, name string) error

	GetSlicePool(ctx context.Context, name string) (*SlicePool, error)
	CreateSlicePool(ctx context.Context, s *SlicePool) error
	UpdateSlicePool(ctx context.Context, s *SlicePool) error
	ListSlicePools(ctx context.Context) ([]*SlicePool, error)

	// Ready reports whether the backend has read its pools once and
	// answers.
	Ready(ctx context.Context) error
}
