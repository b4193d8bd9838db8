package cli

import (
	"github.com/cnibox/cnibox/cniplug"
	"github.com/cnibox/cnibox/store"
)

// attachmentKey names an attachment: network, container ID, interface.
type attachmentKey struct{ network, cid, ifname string }

// readPortMapRecords reads the port mapping role's records, by attachment.
func readPortMapRecords(st *store.Store) (map[attachmentKey]store.PortMapRecord, error) {
	var recs []store.PortMapRecord
	err := st.ViewPortMaps(func(tx *store.PortMapTx) error {
		var err error
		recs, err = tx.List("")
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[attachmentKey]store.PortMapRecord, len(recs))
	for _, r := range recs {
		out[attachmentKey{r.Network, r.ContainerID, r.IfName}] = r
	}
	return out, nil
}

// checkPortMaps runs the port mapping role's check (cniplug.PortMaps.Check:
// its CHECK of the elements and what it sets for 127.0.0.1) on the
// elements the role recorded for the endpoint.
func (d *doctor) checkPortMaps(ec *cniplug.EndpointCheck) {
	ep := ec.Endpoint
	r, ok := d.portMaps[attachmentKey{ep.Network, ep.ContainerID, ep.IfName}]
	pm := d.roles.PortMapper()
	if !ok || pm == nil {
		return
	}
	if want := pm.OfRecord(r); !want.Empty() {
		pm.Check(ec, want)
	}
}
