package nstest

import (
	"sync"
	"time"
)

// inbox keeps everything a listener of a test got, in order, and lets the
// test wait for one that it looks for: nothing that should not have come
// is lost among others.
type inbox[T any] struct {
	mu   sync.Mutex
	got  []T
	more chan struct{} // closed and replaced at each item
}

func newInbox[T any]() *inbox[T] { return &inbox[T]{more: make(chan struct{})} }

func (b *inbox[T]) add(v T) {
	b.mu.Lock()
	b.got = append(b.got, v)
	close(b.more)
	b.more = make(chan struct{})
	b.mu.Unlock()
}

// len is how many items have come.
func (b *inbox[T]) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.got)
}

// all is a copy of every item that has come.
func (b *inbox[T]) all() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]T(nil), b.got...)
}

// seen waits up to wait for an item that match accepts, among those that
// came after the first next, and reports whether one came.
func (b *inbox[T]) seen(next int, match func(T) bool, wait time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		got, more := b.got[min(next, len(b.got)):], b.more
		next = len(b.got)
		b.mu.Unlock()
		for _, v := range got {
			if match(v) {
				return true
			}
		}
		select {
		case <-more:
		case <-deadline.C:
			return false
		}
	}
}
