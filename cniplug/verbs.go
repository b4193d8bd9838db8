package cniplug

import (
	"context"

	"github.com/containernetworking/cni/pkg/types"
)

// Verbs answers a role's verbs (Role.Verbs): a role's Verbs is the address
// of a package-level composite literal, a ConfVerbs most often, so that its
// Role stays data.
type Verbs interface {
	// Run answers the call's verb (a.Command); the result counts for ADD
	// only.
	Run(ctx context.Context, a *Args) (types.Result, error)
}

// ConfVerbs are the verbs of a role, each on the role's parsed config: the
// verb's parse runs first and its error (a coded config error) is the call's
// answer, then the verb gets the config. A verb left nil succeeds without
// parsing.
//
// Parse is every verb's parse unless ParseDel, ParseGC or ParseStatus gives
// that verb its own (a DEL that reads only what finds what ADD made, a
// STATUS that answers code 50 where ADD answers 11). A DEL parses as
// ParseForDel says: a config that ADD would refuse does not stop it. A nil
// parse gives the verbs C's zero value (a role with no config of its own).
type ConfVerbs[C any] struct {
	Parse       func(*Args) (C, error)
	ParseDel    func(*Args) (C, error)
	ParseGC     func(*Args) (C, error)
	ParseStatus func(*Args) (C, error)

	Add    func(context.Context, *Args, C) (types.Result, error)
	Check  func(context.Context, *Args, C) error
	Del    func(context.Context, *Args, C) error
	GC     func(context.Context, *Args, C) error
	Status func(context.Context, *Args, C) error
}

// Run answers the call's verb with v's function for it, on the config that
// verb's parse gives.
func (v *ConfVerbs[C]) Run(ctx context.Context, a *Args) (types.Result, error) {
	parse := v.Parse
	var verb func(context.Context, *Args, C) error
	switch a.Command {
	case "ADD":
		if v.Add == nil {
			return nil, nil
		}
		c, err := v.parse(parse, a)
		if err != nil {
			return nil, err
		}
		return v.Add(ctx, a, c)
	case "CHECK":
		verb = v.Check
	case "DEL":
		verb = v.Del
		if v.ParseDel != nil {
			parse = v.ParseDel
		}
	case "GC":
		verb = v.GC
		if v.ParseGC != nil {
			parse = v.ParseGC
		}
	default: // STATUS: run checked the verb
		verb = v.Status
		if v.ParseStatus != nil {
			parse = v.ParseStatus
		}
	}
	if verb == nil {
		return nil, nil
	}
	c, err := v.parse(parse, a)
	if err != nil {
		return nil, err
	}
	return nil, verb(ctx, a, c)
}

// parse runs a verb's parse (ParseForDel's for a DEL); nil parses nothing.
func (v *ConfVerbs[C]) parse(parse func(*Args) (C, error), a *Args) (C, error) {
	switch {
	case parse == nil:
		var c C
		return c, nil
	case a.Command == "DEL":
		return ParseForDel(a, parse)
	}
	return parse(a)
}

// NoConf is the config of a role that parses none of its own
// (ConfVerbs[NoConf] without Parse): its verbs read a.Conf.
type NoConf struct{}

// Unparsed is the parse of a verb that needs none of the role's config (a
// GC or a STATUS that reads only the network's name): it reads nothing, so
// a config that ADD would refuse does not stop the verb.
func Unparsed[C any](*Args) (C, error) {
	var c C
	return c, nil
}
