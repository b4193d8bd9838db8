package agent

import (
	"fmt"

	"github.com/cnibox/cnibox/agent/backend"
	"github.com/cnibox/cnibox/agent/backend/alloc"
	"github.com/cnibox/cnibox/agent/backend/hostgw"
	"github.com/cnibox/cnibox/agent/backend/ipip"
	"github.com/cnibox/cnibox/agent/backend/vxlan"
	"github.com/cnibox/cnibox/agent/backend/wireguard"
	"github.com/cnibox/cnibox/agent/netconf"
)

// backendEnv is what the backend is made with.
func (a *agent) backendEnv() backend.Env {
	return backend.Env{Config: a.cfg, Log: a.log, Under: a.under, TxChecksumOff: a.o.TxChecksumOff}
}

// newBackend makes the backend of env.Config.Backend.Type.
func newBackend(env backend.Env) (backend.Backend, error) {
	switch t := env.Config.Backend.Type; t {
	case netconf.TypeVXLAN:
		return vxlan.New(env)
	case netconf.TypeHostGW:
		return hostgw.New(env)
	case netconf.TypeWireGuard:
		return wireguard.New(env)
	case netconf.TypeIPIP:
		return ipip.New(env)
	case netconf.TypeAlloc:
		return alloc.New(env), nil
	default:
		return nil, fmt.Errorf("backend %q: not built into this agent", t)
	}
}
