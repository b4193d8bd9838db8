package policy

import "github.com/cnibox/cnibox/internal/policymodel"

// An engine held (Hold) files the policy changes that follow without
// rebuilding its model; Release makes the one rebuild. The agent holds its
// engine through the informers' first lists: a rebuild reads every policy,
// so a model built one policy at a time costs the square of the policies
// (at 1,000 policies and 50,000 pods, 200 MB of garbage and most of the
// first sync's CPU), where one rebuild at the end costs them once. While
// held, pod and namespace changes keep the sets of the last rebuild up to
// date; the sets that the held policies bring are filled whole on Release.
// The model of a held engine is the last rebuild's: hand it to no syncer.

// Hold makes policy changes wait for Release.
func (e *Engine) Hold() { e.held = true }

// Release ends Hold and returns the delta of the rebuild that the changes
// since need (none if none came).
func (e *Engine) Release() policymodel.Delta {
	e.held = false
	if !e.stale {
		return policymodel.Delta{}
	}
	e.stale = false
	return e.rebuild()
}

// rebuildUnlessHeld is rebuild, or nothing but a note for Release while
// held.
func (e *Engine) rebuildUnlessHeld() policymodel.Delta {
	if e.held {
		e.stale = true
		return policymodel.Delta{}
	}
	return e.rebuild()
}
