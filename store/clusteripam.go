package store

// sliceJournals are in bucket slicejournal, which holds the cluster IPAM's journal of node slices:
//
//	slicejournal/  IPPool name -> SliceJournal as JSON
//
// cnibox-agent hands out the addresses of its node's slice in memory and
// writes the IPPool behind; a change is in the journal from the moment it
// is made until the IPPool holds it, so an agent that restarts in between
// writes it then instead of losing it.
var sliceJournals = records[SliceJournal]{bucket: []byte("slicejournal"), what: "slice journal"}

// SliceJournal is the changes of one node slice's IPPool not yet written.
type SliceJournal struct {
	Pool  string `json:"pool"`  // the IPPool's name
	Range string `json:"range"` // its spec.range (the slice)
	// Changes by offset (whereabouts' allocation key).
	Changes map[string]SliceChange `json:"changes"`
}

// SliceChange is one offset's change: held by an attachment, or released.
type SliceChange struct {
	ContainerID string `json:"id,omitempty"`
	PodRef      string `json:"podref,omitempty"`
	IfName      string `json:"ifname,omitempty"`
	Released    bool   `json:"released,omitempty"`
	// Gen is the agent's change counter when it was made (the IPPool
	// write that carries it clears it).
	Gen uint64 `json:"gen"`
}

// PutSliceJournal records j, replacing the pool's journal; an empty one
// removes it.
func (s *Store) PutSliceJournal(j SliceJournal) error {
	if len(j.Changes) == 0 {
		return sliceJournals.deleteKey(s, []byte(j.Pool), j.Pool)
	}
	return sliceJournals.putKey(s, []byte(j.Pool), j.Pool, j)
}

// SliceJournals returns every pool's journal, by pool name.
func (s *Store) SliceJournals() ([]SliceJournal, error) {
	return sliceJournals.listPrefix(s, nil)
}

// GetSliceJournal returns the journal of one pool.
func (s *Store) GetSliceJournal(pool string) (SliceJournal, bool, error) {
	return sliceJournals.getKey(s, []byte(pool))
}
