package cniplug

import (
	"fmt"
	"sort"
)

// SupportedVersions are the CNI spec versions every role of cnibox speaks.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// Role is one CNI plugin that this binary answers as. Its verbs are
// answered by Verbs (a ConfVerbs most often), the one way a role declares
// them.
//
// A role's Role is package-level data: each field a constant, the name of a
// function or the address of a composite literal of such (Verbs: a
// &ConfVerbs[C]{...}), never a value built by a call or a method value.
// Then the linker lays the Role out and no role package has code that runs
// when the binary starts: every call of every role would run it
// (TestNoInitCode).
type Role struct {
	// Name is the plugin type, the symlink name in /opt/cni/bin.
	Name string
	// About is a one-paragraph explanation printed when the role is run by
	// hand without CNI_COMMAND.
	About string
	// Version is the containernetworking/plugins release whose behaviour
	// the role has, as semver without the "v" ("1.9.1"); empty means
	// ReferenceVersion. It heads the explanation of a role run without
	// CNI_COMMAND (see VersionLine), where clients such as nerdctl read it.
	Version string
	// IPAM reports whether the role is an IPAM plugin (for listings).
	IPAM bool
	// JoinsCallerStore says that, run in process as a delegate, the role's
	// store reads and writes may join the caller's store transaction (see
	// store.OpenShared): it does no slow work (no network, no kernel) while
	// it uses the store. A role that queries a server must leave it false,
	// or every other call would wait for that query.
	JoinsCallerStore bool

	// Verbs answers the role's verbs (required).
	Verbs Verbs

	// Commands are subcommands of the role's own name (`dhcp daemon`).
	Commands []Command

	// Known is what the role declares about itself for the node's tools
	// (cnibox check, doctor, gc, store rebuild); nil = nothing.
	Known *Known
}

// Command is a subcommand of a role: Run gets the arguments after its name
// and returns the exit code.
type Command struct {
	Name string
	Run  func(args []string) int
}

// Command returns the role's subcommand called name, or nil.
func (r *Role) Command(name string) *Command {
	for i := range r.Commands {
		if r.Commands[i].Name == name {
			return &r.Commands[i]
		}
	}
	return nil
}

// Registry is the explicit list of roles of a binary, looked up by name.
type Registry struct {
	byName map[string]*Role
	order  []*Role
}

// NewRegistry builds a registry. A duplicate or empty name panics: the list is
// written by hand in one file and a clash is a programming error.
func NewRegistry(roles ...*Role) *Registry {
	r := &Registry{byName: make(map[string]*Role, len(roles))}
	for _, role := range roles {
		if role.Name == "" || role.Verbs == nil {
			panic(fmt.Sprintf("cniplug: role %q has no name or no Verbs", role.Name))
		}
		if role.Version != "" && !isRelease(role.Version) {
			panic(fmt.Sprintf("cniplug: role %q has Version %q: want MAJOR.MINOR.PATCH", role.Name, role.Version))
		}
		if _, dup := r.byName[role.Name]; dup {
			panic(fmt.Sprintf("cniplug: role %q registered twice", role.Name))
		}
		r.byName[role.Name] = role
		r.order = append(r.order, role)
	}
	return r
}

// Lookup returns the role with the given name.
func (r *Registry) Lookup(name string) (*Role, bool) {
	if r == nil {
		return nil, false
	}
	role, ok := r.byName[name]
	return role, ok
}

// Names returns the role names, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.order))
	for _, role := range r.order {
		names = append(names, role.Name)
	}
	sort.Strings(names)
	return names
}

// Roles returns the roles in registration order.
func (r *Registry) Roles() []*Role { return append([]*Role(nil), r.order...) }
