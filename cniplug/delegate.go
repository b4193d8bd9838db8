package cniplug

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// inProcessPrefix marks a "path" that FindInPath resolved to a role of this
// binary; ExecPlugin runs it without exec.
const inProcessPrefix = "cnibox-role:"

// execer implements invoke.Exec: roles of this binary run in process (no exec,
// no second process start), everything else through invoke's RawExec.
type execer struct {
	reg    *Registry
	stderr io.Writer
	// getenv is the calling invocation's environment: an in-process
	// delegate sees it for everything but the CNI_* variables of the call.
	getenv func(string) string
	version.PluginDecoder
}

func (e *execer) FindInPath(plugin string, paths []string) (string, error) {
	if _, ok := e.reg.Lookup(plugin); ok {
		return inProcessPrefix + plugin, nil
	}
	p, err := invoke.FindInPath(plugin, paths)
	if err != nil {
		return "", Errorf(types.ErrInvalidNetworkConfig, "plugin type %q is neither a cnibox role nor found in CNI_PATH %q: install it there or fix the config's \"type\"", plugin, strings.Join(paths, ":"))
	}
	return p, nil
}

func (e *execer) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	name, ok := strings.CutPrefix(pluginPath, inProcessPrefix)
	if !ok {
		return (&invoke.RawExec{Stderr: e.stderr}).ExecPlugin(ctx, pluginPath, stdin, environ)
	}
	role, _ := e.reg.Lookup(name)
	env := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	parent := e.getenv
	if parent == nil {
		parent = os.Getenv
	}
	return Invoke(ctx, role, Invocation{
		Getenv: func(k string) string {
			if strings.HasPrefix(k, "CNI_") {
				return env[k]
			}
			return parent(k)
		},
		Stdin:    bytes.NewReader(stdin),
		Stderr:   e.stderr,
		Registry: e.reg,
	})
}

// DelegateAdd runs ADD of plugin type typ with conf, with this call's
// container, netns, ifname, CNI_ARGS and CNI_PATH.
func (a *Args) DelegateAdd(ctx context.Context, typ string, conf []byte) (types.Result, error) {
	if role, ok := a.Registry.Lookup(typ); ok {
		return a.inProcess(ctx, role, "ADD", conf)
	}
	e := a.execer()
	path, err := e.FindInPath(typ, a.Path)
	if err != nil {
		return nil, err
	}
	return invoke.ExecPluginWithResult(ctx, path, conf, a.delegateArgs("ADD"), e)
}

// DelegateDel runs DEL of plugin type typ with conf.
func (a *Args) DelegateDel(ctx context.Context, typ string, conf []byte) error {
	return a.delegateNoResult(ctx, "DEL", typ, conf)
}

// DelegateCheck runs CHECK of plugin type typ with conf.
func (a *Args) DelegateCheck(ctx context.Context, typ string, conf []byte) error {
	return a.delegateNoResult(ctx, "CHECK", typ, conf)
}

// DelegateGC runs GC of plugin type typ with conf.
func (a *Args) DelegateGC(ctx context.Context, typ string, conf []byte) error {
	return a.delegateNoResult(ctx, "GC", typ, conf)
}

// DelegateStatus runs STATUS of plugin type typ with conf.
func (a *Args) DelegateStatus(ctx context.Context, typ string, conf []byte) error {
	return a.delegateNoResult(ctx, "STATUS", typ, conf)
}

func (a *Args) delegateNoResult(ctx context.Context, verb, typ string, conf []byte) error {
	if role, ok := a.Registry.Lookup(typ); ok {
		_, err := a.inProcess(ctx, role, verb, conf)
		return err
	}
	e := a.execer()
	path, err := e.FindInPath(typ, a.Path)
	if err != nil {
		return err
	}
	return invoke.ExecPluginWithoutResult(ctx, path, conf, a.delegateArgs(verb), e)
}

func (a *Args) execer() *execer {
	return &execer{reg: a.Registry, stderr: a.Stderr, getenv: a.Getenv}
}

func (a *Args) delegateArgs(verb string) *invoke.Args {
	return &invoke.Args{
		Command:       verb,
		ContainerID:   a.ContainerID,
		NetNS:         a.Netns,
		IfName:        a.IfName,
		PluginArgsStr: a.RawArgs,
		Path:          a.PathString(),
	}
}

// inProcess runs verb of one of this binary's roles as a delegate, in this
// process and without the detour an exec'd plugin needs: no environment list,
// no result encoded to JSON and parsed back. The delegate checks its config
// as an exec'd plugin would and sees the caller's container, netns, ifname,
// CNI_ARGS and CNI_PATH; an ADD returns the role's result in the config's
// cniVersion, as invoke parses an exec'd plugin's output (the next plugin of a
// chain reads it as prevResult of that version).
func (a *Args) inProcess(ctx context.Context, role *Role, verb string, conf []byte) (types.Result, error) {
	parent := a.Getenv
	if parent == nil {
		parent = os.Getenv
	}
	ifname := a.IfName
	child := &Args{
		Command:     verb,
		ContainerID: a.ContainerID,
		Netns:       a.Netns,
		IfName:      a.IfName,
		Path:        a.Path,
		RawArgs:     a.RawArgs,
		Registry:    a.Registry,
		Stderr:      a.Stderr,
		shared:      a.shared,
		Getenv: func(k string) string {
			switch k {
			case "CNI_COMMAND":
				return verb
			case "CNI_IFNAME":
				return ifname
			}
			return parent(k)
		},
	}
	res, err := run(ctx, role, child, conf)
	if err != nil || res == nil || child.Conf == nil {
		return res, err
	}
	return res.GetAsVersion(child.Conf.CNIVersion)
}
