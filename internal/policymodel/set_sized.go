package policymodel

// NewSetSized is an empty set with room for about n elements: its parts
// made as n Adds would leave them (one map, or as many parts as Add's
// splits would make), each sized, so that filling it grows no map. A
// set filled again with what it held (the engine's sets of this node's
// pods, made anew at each rebuild) is sized by its old length. n is a
// hint: more or fewer elements are fine.
func NewSetSized(id SetID, kind SetKind, key string, n int) *Set {
	s := &Set{ID: id, Kind: kind, Key: key}
	if n <= 0 {
		return s
	}
	s.tok = &setToken{}
	parts := 1
	if n > splitAt {
		parts = 64
		for n > partSize*parts {
			parts *= 2
		}
	}
	s.parts = make([]*setPart, parts)
	for i := range s.parts {
		s.parts[i] = &setPart{tok: s.tok, m: make(map[Elem]int, n/parts+1)}
	}
	return s
}
