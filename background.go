package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

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

// retryRelease makes release again, retryDelay(ttl) apart, after a release
// that could not reach Redis: until a try has Redis's answer (release returns
// nil), or deadline, when Redis frees the lock by itself, passes. Any answer
// ends it: freed, or not (or no longer) this owner's, which no retry can
// change. Each try is bounded by deadline. Once stop is closed (the Client
// is closing), it makes one last try at once. It returns nil once Redis
// answered, errReleaseLapsed if deadline passed first, else the last try's
// error.
//
// It runs on the caller's goroutine: the caller starts one that Close waits
// for, so that a lock whose release failed is freed soon after Redis is back,
// or at Close, rather than held by nobody until its TTL runs out.
func retryRelease(stop <-chan struct{}, deadline time.Time, ttl time.Duration, release func(ctx context.Context) error) error {
	timer := time.NewTimer(retryDelay(ttl))
	defer timer.Stop()
	for {
		closing := false
		select {
		case <-timer.C:
		case <-stop:
			closing = true
		}
		if !time.Now().Before(deadline) {
			return errReleaseLapsed
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := release(ctx)
		cancel()
		if err == nil || closing {
			return err
		}
		timer.Reset(retryDelay(ttl))
	}
}

// errReleaseLapsed is retryRelease's error when the lock's TTL ran out before
// Redis answered.
var errReleaseLapsed = errors.New("the lock's TTL has run out by now")
