package roletest

import (
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/cnibox/cnibox/cniplug"
)

// DelRefused is a pod's DEL after its config was edited in place into one
// that ADD refuses (issue 62: a pod stuck Terminating, holding its
// address): ADD with conf makes the attachment (its stdout is returned);
// conf with fields set (see With) must be refused by ADD (of another pod)
// with a config code (2, 6 or 7); DEL with it succeeds, twice, and the first says on
// stderr that it went on without the field at path drop ("": the role's
// DEL reads nothing of the config, its record says all). The caller checks
// that what ADD made is gone.
func (n *Node) DelRefused(role *cniplug.Role, p Pod, conf []byte, fields map[string]any, drop string) []byte {
	n.T.Helper()
	out := n.Must(role, "ADD", p, conf)
	edited := With(n.T, conf, fields)
	// (another pod's ADD: a repeated ADD that fails may undo what the
	// first made, and the DEL would have less to do)
	_, err := n.Call(role, "ADD", n.NewPod("refused"), edited)
	switch Code(err) {
	case types.ErrUnsupportedField, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
	default:
		n.T.Fatalf("%s ADD with %v: %v, want a config error (2, 6 or 7): the test's edit is one ADD takes", role.Name, fields, err)
	}
	for i := range 2 {
		_, stderr, err := n.Run(role, "DEL", p, edited)
		if err != nil {
			n.T.Fatalf("%s DEL %d with %v (a config ADD refuses): %v (stderr: %s)", role.Name, i+1, fields, err, stderr)
		}
		if i == 0 && drop != "" && !strings.Contains(stderr, `DEL goes on without "`+drop+`"`) {
			n.T.Errorf("%s DEL with %v: stderr %q does not say it went on without %q", role.Name, fields, stderr, drop)
		}
	}
	return out
}
