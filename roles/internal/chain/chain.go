// Package chain is what the chained roles (bandwidth, tuning, portmap)
// share: their ADD and CHECK work on the parsed config and the main plugin's
// result (prevResult, which they cannot do without), and bandwidth and
// tuning keep one record per attachment in the node's store, written before
// ADD changes anything (with its undo) and removed by DEL after the kernel
// work.
package chain

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/cnibox/cnibox/cniplug"
)

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
