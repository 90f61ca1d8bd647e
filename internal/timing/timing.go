// Package timing is dlock's time policy: the times the scripts are given and
// the pauses between tries, each a fraction of a lock's TTL within bounds
// (doc.go states them for users), and the one loop that retries a release.
package timing

import (
	"context"
	"errors"
	"time"
)

// RenewEvery is how often a lease is renewed while held.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// RenewSlack is how much earlier than RenewEvery a lease may be renewed, to
// share a script call with others.
func RenewSlack(ttl time.Duration) time.Duration { return ttl / 6 }

// GrantFor is the grant lease: how long a release grants a freed lock to
// the waiter next in line (or keeps it for that waiter, for kinds that do not
// grant) before that waiter's Client lengthens it to the TTL. It bounds what
// a waiter that died costs; the Client that is told lengthens it at once.
func GrantFor(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// KeepAlive is how often a waiter renews its registration (by trying again).
// A registration lapses after three of these (RegisterFor), so a waiter that
// died is forgotten soon after.
func KeepAlive(ttl time.Duration) time.Duration {
	return min(max(ttl/6, 50*time.Millisecond), 5*time.Second)
}

// RegisterFor is how long a waiter's registration lasts unless renewed.
func RegisterFor(ttl time.Duration) time.Duration { return 3 * KeepAlive(ttl) }

// RetryDelay is the pause before a failed renewal or release is tried again.
func RetryDelay(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// Drift is the allowance for the difference between the client's and Redis's
// clocks and for timer lateness: the Redlock rule of 1% of the TTL plus 2ms.
func Drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// CleanupTimeout bounds a release made after the caller's context may have
// ended.
func CleanupTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl, time.Second), 5*time.Second)
}

// RetryRelease makes release again, RetryDelay(ttl) apart, after a release
// that could not reach Redis: until a try has Redis's answer (release returns
// nil), or deadline, when Redis frees the lock by itself, passes. Any answer
// ends it: freed, or not (or no longer) this owner's, which no retry can
// change. Each try is bounded by deadline. Once stop is closed (the Client
// is closing), it makes one last try at once. It returns nil once Redis
// answered, ErrReleaseLapsed if deadline passed first, else the last try's
// error.
//
// It runs on the caller's goroutine: the caller starts one that Close waits
// for, so that a lock whose release failed is freed soon after Redis is back,
// or at Close, rather than held by nobody until its TTL runs out.
func RetryRelease(stop <-chan struct{}, deadline time.Time, ttl time.Duration, release func(ctx context.Context) error) error {
	timer := time.NewTimer(RetryDelay(ttl))
	defer timer.Stop()
	for {
		closing := false
		select {
		case <-timer.C:
		case <-stop:
			closing = true
		}
		if !time.Now().Before(deadline) {
			return ErrReleaseLapsed
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := release(ctx)
		cancel()
		if err == nil || closing {
			return err
		}
		timer.Reset(RetryDelay(ttl))
	}
}

// ErrReleaseLapsed is RetryRelease's error when the lock's TTL ran out before
// Redis answered.
var ErrReleaseLapsed = errors.New("the lock's TTL has run out by now")
