package cniplug

// The questions nodestate and cli ask of the roles' declarations (Known),
// so that they name no role. A nil Registry knows no role.

// KnownOf returns what the role named plugin declares, or nil.
func (r *Registry) KnownOf(plugin string) *Known {
	if r == nil {
		return nil
	}
	role, ok := r.Lookup(plugin)
	if !ok {
		return nil
	}
	return role.Known
}

// HostVeths returns the host veth layouts the roles declare, each once.
func (r *Registry) HostVeths() []*HostVeth {
	if r == nil {
		return nil
	}
	var out []*HostVeth
	for _, k := range r.Known() {
		if k.HostVeth != nil && !containsVeth(out, k.HostVeth) {
			out = append(out, k.HostVeth)
		}
	}
	return out
}

func containsVeth(vs []*HostVeth, v *HostVeth) bool {
	for _, w := range vs {
		if w == v {
			return true
		}
	}
	return false
}

// HostVethOf returns the layout whose names a link name has, or nil.
func (r *Registry) HostVethOf(name string) *HostVeth {
	for _, v := range r.HostVeths() {
		if v.Is(name) {
			return v
		}
	}
	return nil
}

// HostVethNames returns the names an attachment's host veth has under each
// role's layout (a reservation or a cached attachment keeps any of them).
func (r *Registry) HostVethNames(containerID, ifname string) []string {
	var out []string
	for _, v := range r.HostVeths() {
		out = append(out, v.Name(containerID, ifname))
	}
	return out
}

// IsStoreIPAM reports whether the role named typ is an IPAM whose
// reservations store rebuild makes again from the pods' addresses.
func (r *Registry) IsStoreIPAM(typ string) bool {
	k := r.KnownOf(typ)
	return k != nil && k.StoreIPAM
}

// PodDeviceOf returns what the role named plugin leaves in the pod when its
// pod interface is a device (no host veth), or nil.
func (r *Registry) PodDeviceOf(plugin string) *PodDevice {
	if k := r.KnownOf(plugin); k != nil {
		return k.PodDevice
	}
	return nil
}

// Doctor runs every role's Doctor hook on c (a chained role finds its own
// records).
func (r *Registry) Doctor(c *EndpointCheck) {
	r.runHooks(c, func(k *Known) func(*EndpointCheck) { return k.Doctor })
}

// DoctorForwards runs every role's DoctorForwards hook on c.
func (r *Registry) DoctorForwards(c *EndpointCheck) {
	r.runHooks(c, func(k *Known) func(*EndpointCheck) { return k.DoctorForwards })
}

// runHooks runs on c the hook of every role that declares one.
func (r *Registry) runHooks(c *EndpointCheck, hook func(*Known) func(*EndpointCheck)) {
	for _, k := range r.Known() { // none for a nil Registry
		if h := hook(k.Known); h != nil {
			h(c)
		}
	}
}
