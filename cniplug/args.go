package cniplug

import (
	"io"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
)

// Args is one invocation of a role: the CNI_* environment, stdin and the
// common parts of the config, already validated.
type Args struct {
	Command     string
	ContainerID string
	Netns       string
	IfName      string
	Path        []string // CNI_PATH
	RawArgs     string   // CNI_ARGS as given
	StdinData   []byte
	Conf        *NetConf
	CNIArgs     CNIArgs

	// Registry is the binary's roles, for in-process delegation.
	Registry *Registry
	// Stderr receives logs; never stdout.
	Stderr io.Writer
	// Getenv reads the invocation's environment (the process's, or the one
	// given to an in-process delegate).
	Getenv func(string) string

	log *callLog
	// shared holds values of this call that in-process delegates see too
	// (an open store, so that a delegate's writes join the caller's
	// transaction).
	shared map[any]any
}

// Shared returns the value set under key by this call or by the role that
// delegated to it in process, or nil.
func (a *Args) Shared(key any) any {
	if a == nil || a.shared == nil {
		return nil
	}
	return a.shared[key]
}

// SetShared sets (or, with v nil, removes) the value under key for the rest
// of this call and the in-process delegates it runs from now on. Values are
// never seen by exec'd plugins.
func (a *Args) SetShared(key, v any) {
	if v == nil {
		delete(a.shared, key)
		return
	}
	if a.shared == nil {
		a.shared = map[any]any{}
	}
	a.shared[key] = v
}

// Setting is a path or value a config may set: configured when it is not
// empty, else the call's $env when that is set, else def.
func (a *Args) Setting(configured, env, def string) string {
	if configured != "" {
		return configured
	}
	if a.Getenv != nil {
		if v := a.Getenv(env); v != "" {
			return v
		}
	}
	return def
}

// CNIArgs are the CNI_ARGS keys cnibox understands. Unknown keys are an error
// unless IgnoreUnknown=1 (or true) is among them, as in the reference plugins.
type CNIArgs struct {
	types.CommonArgs
	IP                         types.UnmarshallableString
	MAC                        types.UnmarshallableString
	GATEWAY                    types.UnmarshallableString
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // the wire name
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

// Pod returns "namespace/name" of the Kubernetes pod (or podman container name
// in K8S_POD_NAME), or "" when the runtime gave none.
func (c CNIArgs) Pod() string {
	if c.K8S_POD_NAME == "" {
		return ""
	}
	return string(c.K8S_POD_NAMESPACE) + "/" + string(c.K8S_POD_NAME)
}

// PathString returns CNI_PATH joined again.
func (a *Args) PathString() string {
	s := ""
	for i, p := range a.Path {
		if i > 0 {
			s += string(filepath.ListSeparator)
		}
		s += p
	}
	return s
}
