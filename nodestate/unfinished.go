package nodestate

import (
	"fmt"
	"time"
)

// AddGrace is how old an attachment's record must be before the lack of a
// runtime cache entry counts as evidence that its ADD never completed
// (rules 1c and 2c): an ADD in flight has no cache entry yet (libcni writes
// it after the last plugin), and a runtime gives an ADD minutes at most.
const AddGrace = 10 * time.Minute

// unfinishedADD returns the evidence of rules 1c and 2c: why the
// attachment of container cid, recorded at created, is one whose ADD never
// completed, or "" without such evidence. libcni writes its cache entry
// only after every plugin of the list succeeded; when an ADD fails, the
// runtime's DEL (libcni's DelNetworkList) stops at the first plugin whose
// DEL fails too (one that does not speak the list's cniVersion), and the
// plugins before it keep their records and addresses. The evidence: the
// runtime's cache was read and holds entries (the runtime caches there),
// none of them is of the container (in any network: a Multus delegate's
// container is cached under Multus's network), no meta role's delegate
// record names it (flannel's and multi's delegates are cached under the
// meta role's network), and the record is older than AddGrace.
func (v View) unfinishedADD(cid string, created time.Time) string {
	if len(v.Cached) == 0 || created.IsZero() || v.Now.Sub(created) < AddGrace {
		return ""
	}
	for _, a := range v.Cached {
		if a.ContainerID == cid {
			return ""
		}
	}
	for _, l := range v.Roles.Leftovers() {
		for _, k := range l.Records {
			if !k.Meta {
				continue
			}
			for _, r := range v.Records[k.Kind] {
				if r.ContainerID == cid {
					return ""
				}
			}
		}
	}
	return fmt.Sprintf("its ADD never completed: recorded %s ago, and the runtime's libcni cache (%d entries) has none of its container (a failed ADD whose DEL stopped before this plugin)",
		v.Now.Sub(created).Round(time.Second), len(v.Cached))
}
