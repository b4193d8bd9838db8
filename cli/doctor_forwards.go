package cli

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// checkForwards runs the roles' DoctorForwards hooks on the endpoint (the
// port mappings the node forwards to it), with the store open while they
// run: a role reads its own records.
func (d *doctor) checkForwards(ec *cniplug.EndpointCheck) {
	st, err := store.OpenWith(store.Dir(d.view.DataDir), store.Options{NoCreate: true})
	if err != nil {
		return
	}
	defer st.Close()
	ec.Store = st
	d.roles.DoctorForwards(ec)
	ec.Store = nil
}
