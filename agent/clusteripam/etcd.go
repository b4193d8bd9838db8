package clusteripam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cnibox/cnibox/internal/wbpool"
)

// Etcd keeps the pools in etcd, for podman or nerdctl hosts that share a
// LAN range without Kubernetes (whereabouts documents an etcd store but
// has none). The objects are whereabouts' under one prefix:
// <prefix>/ippools/<name> holds {"range", "allocations", "sticky"},
// <prefix>/overlappingrangeipreservations/<name> and
// <prefix>/nodeslicepools/<name> their specs; a key's mod revision is its
// version, and writes are transactions on it.
type Etcd struct {
	Client *clientv3.Client
	Prefix string // e.g. /cnibox/whereabouts
}

var _ Backend = (*Etcd)(nil)

type etcdPool struct {
	Range       string                       `json:"range"`
	Allocations map[string]wbpool.Allocation `json:"allocations"`
	Sticky      map[string]string            `json:"sticky,omitempty"`
}

type etcdSlicePool struct {
	Range     string  `json:"range"`
	SliceSize string  `json:"sliceSize"`
	Slices    []Slice `json:"allocations"`
}

func (e *Etcd) key(kind, name string) string {
	return strings.TrimRight(e.Prefix, "/") + "/" + kind + "/" + name
}

// etcdErr names the failed call, and says so plainly when etcd did not
// answer in time (the client waits for a connection that never comes).
func etcdErr(op, key string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("etcd %s %s: no answer in %v: is etcd up and reachable from this node (--etcd-endpoints)? %w", op, key, CallTimeout, err)
	}
	return fmt.Errorf("etcd %s %s: %w", op, key, err)
}

// get reads key into v and returns its mod revision.
func (e *Etcd) get(ctx context.Context, key string, v any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := e.Client.Get(ctx, key)
	if err != nil {
		return "", etcdErr("get", key, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return "", fmt.Errorf("etcd %s: %w", key, err)
	}
	return strconv.FormatInt(resp.Kvs[0].ModRevision, 10), nil
}

// put writes v at key if its mod revision is still version ("" = the key
// must not exist); lost is ErrConflict or ErrExists.
func (e *Etcd) put(ctx context.Context, key, version string, v any, lost error) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if version != "" {
		rev, err := strconv.ParseInt(version, 10, 64)
		if err != nil {
			return "", fmt.Errorf("etcd %s: version %q: %w", key, version, err)
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", rev)
	}
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := e.Client.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return "", etcdErr("put", key, err)
	}
	if !resp.Succeeded {
		return "", fmt.Errorf("%w: %s", lost, key)
	}
	return strconv.FormatInt(resp.Header.Revision, 10), nil
}

// listAs reads every record of kind ("ippools", "nodeslicepools"), in
// key order, each decoded from JSON into a T and made an R by conv with its
// name and version; one that does not decode is passed over.
func listAs[T, R any](ctx context.Context, e *Etcd, kind string, conv func(v T, name, version string) R) ([]R, error) {
	prefix := e.key(kind, "")
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := e.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr("list", prefix, err)
	}
	var out []R
	for _, kv := range resp.Kvs {
		var v T
		if json.Unmarshal(kv.Value, &v) == nil {
			out = append(out, conv(v, strings.TrimPrefix(string(kv.Key), prefix), strconv.FormatInt(kv.ModRevision, 10)))
		}
	}
	return out, nil
}

// GetPool reads a pool (always from etcd: a read is as cheap as a cache).
func (e *Etcd) GetPool(ctx context.Context, name string, _ bool) (*Pool, error) {
	var ep etcdPool
	ver, err := e.get(ctx, e.key("ippools", name), &ep)
	if err != nil {
		return nil, err
	}
	return ep.pool(name, ver).clone(), nil
}

func (ep etcdPool) pool(name, version string) *Pool {
	return &Pool{Name: name, Range: ep.Range, Allocations: ep.Allocations, Sticky: ep.Sticky, Version: version}
}

func toEtcd(p *Pool) etcdPool {
	ep := etcdPool{Range: p.Range, Allocations: p.Allocations, Sticky: p.Sticky}
	if ep.Allocations == nil {
		ep.Allocations = map[string]wbpool.Allocation{}
	}
	return ep
}

// CreatePool creates a pool.
func (e *Etcd) CreatePool(ctx context.Context, p *Pool) error {
	_, err := e.put(ctx, e.key("ippools", p.Name), "", toEtcd(p), ErrExists)
	return err
}

// UpdatePool writes a pool on the version read.
func (e *Etcd) UpdatePool(ctx context.Context, p *Pool) (*Pool, error) {
	ver, err := e.put(ctx, e.key("ippools", p.Name), p.Version, toEtcd(p), ErrConflict)
	if err != nil {
		return nil, err
	}
	out := p.clone()
	out.Version = ver
	return out, nil
}

// ListPools lists the pools.
func (e *Etcd) ListPools(ctx context.Context) ([]*Pool, error) {
	out, err := listAs(ctx, e, "ippools", etcdPool.pool)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// GetReservation reads an OverlappingRangeIPReservation.
func (e *Etcd) GetReservation(ctx context.Context, name string) (*Reservation, error) {
	var r Reservation
	if _, err := e.get(ctx, e.key("overlappingrangeipreservations", name), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// CreateReservation creates one (ErrExists when it exists).
func (e *Etcd) CreateReservation(ctx context.Context, name string, r Reservation) error {
	_, err := e.put(ctx, e.key("overlappingrangeipreservations", name), "", r, ErrExists)
	return err
}

// DeleteReservation deletes one.
func (e *Etcd) DeleteReservation(ctx context.Context, name string) error {
	key := e.key("overlappingrangeipreservations", name)
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if _, err := e.Client.Delete(ctx, key); err != nil {
		return etcdErr("delete", key, err)
	}
	return nil
}

// GetSlicePool reads a NodeSlicePool.
func (e *Etcd) GetSlicePool(ctx context.Context, name string) (*SlicePool, error) {
	var es etcdSlicePool
	ver, err := e.get(ctx, e.key("nodeslicepools", name), &es)
	if err != nil {
		return nil, err
	}
	return es.slicePool(name, ver), nil
}

func (es etcdSlicePool) slicePool(name, version string) *SlicePool {
	return &SlicePool{Name: name, Range: es.Range, SliceSize: es.SliceSize, Slices: es.Slices, Version: version}
}

// CreateSlicePool creates a NodeSlicePool.
func (e *Etcd) CreateSlicePool(ctx context.Context, s *SlicePool) error {
	_, err := e.put(ctx, e.key("nodeslicepools", s.Name), "", etcdSlicePool{s.Range, s.SliceSize, s.Slices}, ErrExists)
	return err
}

// UpdateSlicePool writes a NodeSlicePool on the version read.
func (e *Etcd) UpdateSlicePool(ctx context.Context, s *SlicePool) error {
	_, err := e.put(ctx, e.key("nodeslicepools", s.Name), s.Version, etcdSlicePool{s.Range, s.SliceSize, s.Slices}, ErrConflict)
	return err
}

// ListSlicePools lists the NodeSlicePools.
func (e *Etcd) ListSlicePools(ctx context.Context) ([]*SlicePool, error) {
	return listAs(ctx, e, "nodeslicepools", etcdSlicePool.slicePool)
}

// Ready reports whether etcd answers.
func (e *Etcd) Ready(ctx context.Context) error {
	key := e.key("ippools", "")
	ctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	if _, err := e.Client.Get(ctx, key, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return etcdErr("count", key, err)
	}
	return nil
}
