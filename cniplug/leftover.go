package cniplug

import (
	"net/netip"
	"slices"

	"github.com/cnibox/cnibox/netops"
	"github.com/cnibox/cnibox/store"
)

// Leftovers is what a role declares about the records it keeps in the
// store and what it makes on the node besides them, so that `cnibox gc`
// finds and removes what pods that are gone left of the role, and `cnibox
// doctor` reports it. nodestate judges the records by the rules of its
// package documentation and asks the role's hooks for the rest; it names
// no role (TestToolsNameNoRole). Like Known, package-level data.
type Leftovers struct {
	// Rank orders the roles' leftovers in gc's listing, after the node's
	// own kinds (endpoints, reservations, veths, masquerade entries):
	// lower first.
	Rank int
	// Kinds are the kinds of the role's leftovers (Leftover.Kind), in the
	// order gc lists them.
	Kinds []string
	// Records are the role's kinds of record in the store, one per
	// attachment (store.Kind): a record whose attachment is gone is a
	// leftover of its RecordKind.Kind.
	Records []RecordKind
	// Read reads what of the role's the node's kernel holds, for Find
	// (LeftoverView.Kernel); nil = nothing.
	Read func(host *netops.Handle) (any, error)
	// Find says what goes with each of the role's stale records (the
	// leftovers of LeftoverView.Stale: their Ports, Device, Notes, Kernel)
	// and adds the leftovers no record names (LeftoverView.Found); nil =
	// nothing but the records.
	Find func(v *LeftoverView)
	// Remove removes the kernel part of the role's leftovers, before
	// their records go: it sets Error (the record then stays, so a rerun
	// finds it again) or Skipped, and Done for a leftover without a
	// record. nodestate then deletes the record of every leftover that
	// has one and neither.
	Remove func(r *LeftoverRemoval)
}

// RecordKind is a kind of record a role keeps one per attachment.
type RecordKind struct {
	// Kind is the leftover kind of a stale record ("tuning").
	Kind string
	// Bucket is the kind's bucket in the store (store.Kind.Bucket).
	Bucket string
	// Witness says that a record's netns and boot speak for its whole
	// container (it has one netns): a container a record says is gone
	// (its netns is gone, or it is from before the last reboot) is gone
	// for every record of it (rule 5e).
	Witness bool
	// Meta says that the records are a meta role's, whose delegates the
	// runtime caches under the meta role's network: a container a record
	// names is no evidence of an ADD that never completed (rule 1c).
	Meta bool
}

// Leftover is one thing a pod that is gone left on the node, as gc prints
// and removes it (nodestate.Orphan).
type Leftover struct {
	// Kind is nodestate's kind (endpoint, reservation, veth, masquerade) or
	// one of a role's Leftovers.Kinds.
	Kind        string     `json:"kind"`
	Network     string     `json:"network,omitempty"`
	ContainerID string     `json:"containerID,omitempty"`
	IfName      string     `json:"ifName,omitempty"`
	Pod         string     `json:"pod,omitempty"`
	Netns       string     `json:"netns,omitempty"`
	Addr        netip.Addr `json:"addr,omitzero"`
	Veth        string     `json:"veth,omitempty"`
	// Plugin is the role that wrote the record, when the record says.
	Plugin string `json:"plugin,omitempty"`
	// Ports are the forwarded ports that go with it.
	Ports []string `json:"ports,omitempty"`
	// Owner is the owner comment of kernel objects that name no
	// attachment.
	Owner string `json:"owner,omitempty"`
	// Device is a device of the role's on the node that goes with it, or
	// is it, while it is still there. (Its JSON name is the one gc has
	// always given it.)
	Device string `json:"ifb,omitempty"`
	Reason string `json:"reason"`
	// Done and Error say what gc did (empty on a dry run).
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
	// Skipped says why gc left it after all.
	Skipped string `json:"skipped,omitempty"`

	// Notes are more words on what goes with it, for a person ("ifb X").
	Notes []string `json:"-"`
	// Record is the stale record (nil: none).
	Record *store.RawRecord `json:"-"`
	// Kernel is what the role's Remove needs to remove its kernel part.
	Kernel any `json:"-"`
}

// LeftoverView is what a role's Find is given.
type LeftoverView struct {
	// Stale are the leftovers of the role's stale records.
	Stale []*Leftover
	// Records are all of the role's records, by RecordKind.Kind.
	Records map[string][]store.RawRecord
	// Kernel is what the role's Read returned.
	Kernel any
	// Links are the node's links.
	Links []netops.Link
	// Known are the attachments the node knows of: its endpoint records
	// and the runtime's cache entries.
	Known []store.Attachment
	// Gone returns why an attachment is gone (rule 5), "" without
	// evidence.
	Gone func(store.Attachment) string
	// Lives reports whether the node says the attachment lives: it has an
	// endpoint record, or another record, cache entry or endpoint of its
	// container names a live netns.
	Lives func(store.Attachment) bool
	// Found are the leftovers no record names, which Find adds.
	Found []Leftover
}

// LeftoverRemoval is what a role's Remove is given.
type LeftoverRemoval struct {
	Host *netops.Handle
	// DataDir is the store's directory ("" = the default), to read the
	// role's records once more before a removal that an ADD in flight
	// could race.
	DataDir string
	// Leftovers are the role's (of its Kinds), to remove.
	Leftovers []*Leftover
}

// Leftovers returns the roles' declarations of their leftovers, each once
// (roles that keep one kind of record, such as flannel's and multi's
// delegate records, share one), by Rank.
func (r *Registry) Leftovers() []*Leftovers {
	var out []*Leftovers
	for _, k := range r.Known() {
		if k.Leftovers != nil && !slices.Contains(out, k.Leftovers) {
			out = append(out, k.Leftovers)
		}
	}
	slices.SortStableFunc(out, func(a, b *Leftovers) int { return a.Rank - b.Rank })
	return out
}

// LeftoverKinds returns every role's leftover kinds, in gc's listing
// order.
func (r *Registry) LeftoverKinds() []string {
	var out []string
	for _, l := range r.Leftovers() {
		out = append(out, l.Kinds...)
	}
	return out
}
