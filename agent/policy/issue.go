package policy

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrUnexpressible is what every Issue wraps: the API accepted a policy (or
// an older API server or a CRD without validation let it through) that the
// engine cannot express.
var ErrUnexpressible = errors.New("policy cannot be expressed")

// Issue is one part of a policy the engine could not express, and what it
// did instead (always the closed form: an allow that matches nothing, a
// deny that matches everything, a subject widened to every pod it could
// select). The watcher logs it and records an Event on the policy.
type Issue struct {
	Policy string // the policy's ID ("np/<ns>/<name>", "cnp/<name>")
	Field  string // the field's path, as the API names it ("spec.ingress[0].from[1].ipBlock.cidr")
	Value  string
	Reason string // what is wrong and what the engine did instead
}

func (i Issue) Error() string {
	return fmt.Sprintf("%s: %s %q: %s", i.Policy, i.Field, i.Value, i.Reason)
}

// Unwrap makes errors.Is(issue, ErrUnexpressible) hold.
func (i Issue) Unwrap() error { return ErrUnexpressible }

// jsonText is v as the API's JSON, for an Issue's value.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
