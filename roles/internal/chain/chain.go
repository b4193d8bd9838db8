// Package chain is what the chained roles (bandwidth, tuning, portmap,
// firewall, sbr, vrf) share: their verbs (Verbs), whose ADD and CHECK work
// on the parsed config and the main plugin's result (prevResult, which they
// cannot do without); and the records that bandwidth and tuning keep, one
// per attachment in the node's store, written before ADD changes anything
// (with its undo) and removed by DEL after the kernel work.
package chain

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
)

// Verbs are a chained role's verbs (a cniplug.Verbs): ADD and CHECK get the
// parsed config and prevResult (see Add and Check), DEL, GC and STATUS the
// config as cniplug.ConfVerbs gives it (with ParseDel and ParseGC as
// there); with Records, DEL is Records' (see Records.Del) and Del is not
// used.
type Verbs[C any] struct {
	Parse    func(*cniplug.Args) (C, error)
	ParseDel func(*cniplug.Args) (C, error)
	ParseGC  func(*cniplug.Args) (C, error)
	Add      func(context.Context, *cniplug.Args, C, *current.Result) (types.Result, error)
	Check    func(context.Context, *cniplug.Args, C, *current.Result) error
	Del      func(context.Context, *cniplug.Args, C) error
	GC       func(context.Context, *cniplug.Args, C) error
	Status   func(context.Context, *cniplug.Args, C) error
	Records  interface {
		Del(context.Context, *cniplug.Args) error
	}
}

// NeedsPrevResult says that a chained role's ADD needs the main plugin's
// result (cniplug.Role.Chained: `cnibox check` refuses a chained plugin
// with no main plugin before it).
func (v *Verbs[C]) NeedsPrevResult() bool { return true }

// Run answers the call's verb with v's function for it.
func (v *Verbs[C]) Run(ctx context.Context, a *cniplug.Args) (types.Result, error) {
	switch {
	case a.Command == "ADD":
		return Add(ctx, a, v.Parse, v.Add)
	case a.Command == "CHECK" && v.Check != nil:
		return nil, Check(ctx, a, v.Parse, v.Check)
	case a.Command == "DEL" && v.Records != nil:
		return nil, v.Records.Del(ctx, a)
	}
	rest := cniplug.ConfVerbs[C]{Parse: v.Parse, ParseDel: v.ParseDel, ParseGC: v.ParseGC, Del: v.Del, GC: v.GC, Status: v.Status}
	return rest.Run(ctx, a)
}

// Add runs a chained ADD: parse runs first (its coded error is the answer),
// then the call must carry a prevResult (Args.RequirePrevResult's code 7
// otherwise), and add gets both.
func Add[C any](ctx context.Context, a *cniplug.Args, parse func(*cniplug.Args) (C, error), add func(context.Context, *cniplug.Args, C, *current.Result) (types.Result, error)) (types.Result, error) {
	c, err := parse(a)
	if err != nil {
		return nil, err
	}
	prev, err := a.RequirePrevResult()
	if err != nil {
		return nil, err
	}
	return add(ctx, a, c, prev)
}

// Check is Add for a CHECK.
func Check[C any](ctx context.Context, a *cniplug.Args, parse func(*cniplug.Args) (C, error), check func(context.Context, *cniplug.Args, C, *current.Result) error) error {
	c, err := parse(a)
	if err != nil {
		return err
	}
	prev, err := a.RequirePrevResult()
	if err != nil {
		return err
	}
	return check(ctx, a, c, prev)
}
