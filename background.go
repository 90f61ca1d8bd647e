package dlock

import "sync"

// background is the work a Client does beside its callers, which Close waits
// for: requests left behind by callers whose context ended, waiters'
// unregistrations, releases retried after a failed Unlock or acquire
// (retryRelease), and waiting Locks,
// which must leave their queue in Redis before Close returns. Once Close
// waits, nothing new starts.
type background struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// goDo runs f in a goroutine that close waits for, and reports whether it
// did: once close has started, it does not.
func (b *background) goDo(f func()) bool {
	if !b.add() {
		return false
	}
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// doSoon runs f in the background if it can, else on the caller's goroutine.
func (b *background) doSoon(f func()) {
	if !b.goDo(f) {
		f()
	}
}

// add counts a piece of work on the caller's goroutine that close is to wait
// for, and reports whether it may proceed; a counted piece ends with
// b.wg.Done().
func (b *background) add() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

// close stops new work and waits for what is under way.
func (b *background) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.wg.Wait()
}
