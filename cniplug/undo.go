package cniplug

// Undo collects the undo steps of an ADD in the order they were taken. If a
// later step fails, Run undoes them newest first; after success, Discard.
type Undo struct{ steps []func() }

// Push records the undo of a step that succeeded.
func (u *Undo) Push(f func()) { u.steps = append(u.steps, f) }

// Run undoes every recorded step, newest first, and forgets them.
func (u *Undo) Run() {
	for i := len(u.steps) - 1; i >= 0; i-- {
		u.steps[i]()
	}
	u.steps = nil
}

// Discard forgets the recorded steps: the ADD succeeded.
func (u *Undo) Discard() { u.steps = nil }
