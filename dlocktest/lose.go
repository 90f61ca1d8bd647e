package dlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/leasehook"
)

// checkTimeout bounds the requests Lose and Steal make: a Redis that does not
// answer (a Faults switch left paused) fails the test instead of hanging it.
const checkTimeout = 10 * time.Second

// Lose makes the lease lost, as if it had expired: it frees the lock in
// Redis, then has the lease's Client ask Redis about the lease at once, as a
// renewal would, and returns after the lease's Done is closed. Err then
// matches dlock.ErrLockLost, and the Client's hooks and log report the loss.
// This holds whether or not the lease renews (WithoutRenewal), and without
// waiting for a renewal. A context from the lease's Context (the one Do
// hands its function, a lockhttp handler's) is cancelled a moment later, on
// a goroutine of its own, as with context.AfterFunc: to see it cancelled,
// wait for its Done rather than read its Err once.
//
// The lease may be a *dlock.Lease of a Mutex, FairMutex, RWMutex (read or
// write hold) or Semaphore, or a *dlock.Leadership of an Election. The lock
// is freed as its holder's last Unlock frees it, re-entries included, except
// that the holder is not told: the next waiter in line, if any, is granted
// the lock at once (where an expiry would leave it to notice when it next
// looks), and an Election's leader record is cleared. The lease's other holds
// of the same lock (a re-entered Lease) end with it.
//
// Lose needs the lease's Client to reach Redis. It fails the test for a nil
// lease, a lease that has already ended or was unlocked, a lease of a
// RedLock Client (errors.ErrUnsupported), or a Redis that does not answer
// within 10 s.
func Lose[L *dlock.Lease | *dlock.Leadership](t testing.TB, lease L) {
	if nilT(t, "Lose") {
		return
	}
	t.Helper()
	takeAway(t, "Lose", lease, leasehook.Lose)
}

// Steal makes the lease lost to another owner: it frees the lock in Redis as
// Lose does, has another owner take it with a fence higher than the lease's
// (unless the release granted it to a waiter, who then holds it with such a
// fence), then has the lease's Client ask Redis about the lease at once and
// returns after the lease's Done is closed; Err matches dlock.ErrLockLost
// and says another owner holds the lock.
//
// The other owner takes what the lease held: the lock, the same read or
// write hold, the same number of permits, or an Election's leadership (with
// the value "dlocktest.Steal"). Nobody renews its hold: it lasts the lease's
// TTL and then expires, as that of a process that died would, unless the
// test frees it with the Client's ForceRelease; Inspect shows it, with
// owner "dlocktest.Steal:…". A resource that checks fences rejects the
// lease's holder from then on, once it has seen the new fence.
//
// Steal accepts the same leases as Lose and fails the test in the same
// cases, and also when Redis shows no other owner holding the lock with a
// higher fence afterwards (the total of a Semaphore lowered below the
// lease's permits, say).
func Steal[L *dlock.Lease | *dlock.Leadership](t testing.TB, lease L) {
	if nilT(t, "Steal") {
		return
	}
	t.Helper()
	takeAway(t, "Steal", lease, leasehook.Steal)
}

// ended is what Lose and Steal need of a lease to wait for its end.
type ended interface{ Done() <-chan struct{} }

func takeAway(t testing.TB, fn string, lease any, hook func(context.Context, any) error) {
	t.Helper()
	if hook == nil {
		t.Fatalf("dlocktest.%s: package dlock did not install its test hook", fn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := hook(ctx, lease); err != nil {
		t.Fatal(err) // "dlock: dlocktest.Lose …: why"
	}
	select {
	case <-lease.(ended).Done():
	default:
		t.Fatalf("dlocktest.%s: the lease was taken away in Redis, but its Done is still open", fn)
	}
}
