package cniplug

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
)

// WithConf adapts a verb that works on the role's parsed config to the
// signature of a Role's Check, Del, GC or Status: parse runs first and its
// error (a coded config error) is the call's answer.
func WithConf[C any](parse func(*Args) (C, error), verb func(context.Context, *Args, C) error) func(context.Context, *Args) error {
	return func(ctx context.Context, a *Args) error {
		c, err := parse(a)
		if err != nil {
			return err
		}
		return verb(ctx, a, c)
	}
}

// AddWithConf is WithConf for a Role's Add.
func AddWithConf[C any](parse func(*Args) (C, error), add func(context.Context, *Args, C) (types.Result, error)) func(context.Context, *Args) (types.Result, error) {
	return func(ctx context.Context, a *Args) (types.Result, error) {
		c, err := parse(a)
		if err != nil {
			return nil, err
		}
		return add(ctx, a, c)
	}
}
