package dlock

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/leasehook"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Package dlocktest takes leases away through internal/leasehook, which these
// functions fill in; nothing is exported for it.
func init() {
	leasehook.Lose = func(ctx context.Context, lease any) error { return takeAway(ctx, "dlocktest.Lose", lease, false) }
	leasehook.Steal = func(ctx context.Context, lease any) error { return takeAway(ctx, "dlocktest.Steal", lease, true) }
}

// thieves makes the owner ids of dlocktest.Steal unique within a process;
// the Client's id makes them unique across processes.
var thieves atomic.Uint64

// takeAway frees the lock of lease (a *Lease or a *Leadership) in Redis, as
// its holder's own last release would: the next waiter, if any, is granted
// it. With steal, another owner then takes it, unless the release granted it
// to a waiter, and Redis must show a holder other than the lease's with a
// higher fence. Last it asks Redis whether the lease's owner still holds it,
// as a renewal would, and ends the lease as lost, so that Done is closed when
// it returns nil.
func takeAway(ctx context.Context, op string, lease any, steal bool) error {
	var l *Lease
	switch v := lease.(type) {
	case *Lease:
		l = v
	case *Leadership:
		if v != nil {
			l = v.l
		}
	default:
		return errs.Op(nil, nil, "%s: a %T is not a *dlock.Lease or a *dlock.Leadership", op, lease)
	}
	if l == nil || l.h == nil {
		return errs.Op(nil, nil, "%s: nil or zero lease", op)
	}
	t, e := l.h.t, l.h.e
	switch {
	case ctx == nil:
		return errs.Op(nil, nil, "%s %q: nil context", op, t.K.Name)
	case t.Ending.Cause() != nil:
		return errs.Op(nil, t.Ending.Cause(), "%s %q: the lease has already ended", op, t.K.Name)
	case l.unlocked.Load():
		return errs.Op(nil, nil, "%s %q: the Lease was unlocked", op, t.K.Name)
	case e.admin == nil:
		return e.unsupported(op, t.K.Name)
	}
	ttl := e.ren.TTLOf(t)
	var before protocol.State
	if steal {
		var err error
		if before, err = inspectKeys(ctx, e, *t.K); err != nil {
			return errs.Op(nil, err, "%s %q: read the lock", op, t.K.Name)
		}
	}
	if _, err := e.admin.Evict(ctx, *t.K, t.Owner, t.Fence, ttl); err != nil {
		return errs.Op(nil, err, "%s %q: free the lock", op, t.K.Name)
	}
	var stolen error
	if steal {
		stolen = takeFor(ctx, e, t.K, t.Owner, t.Fence, ttl, before)
	}
	_, code, err := e.backend.TTL(ctx, *t.K, t.Owner)
	switch {
	case err != nil:
		return errs.Op(nil, err, "%s %q: check the lease", op, t.K.Name)
	case code == protocol.CodeDone:
		return errs.Op(nil, nil, "%s %q: Redis still counts the lease as held after it was freed", op, t.K.Name)
	case steal:
		code = protocol.CodeOther
	}
	e.ren.Lose(t, t.LostErr(code))
	if stolen != nil {
		return errs.Op(nil, stolen, "%s %q", op, t.K.Name)
	}
	return nil
}

// takeFor has an owner of its own take the lock k, whose lease of owner
// with fence was just freed, and checks that someone other than owner holds
// it with a higher fence: the thief, or the waiter the release granted it
// to. before is the lock as Redis held it before the release.
func takeFor(ctx context.Context, e *engine, k *protocol.Keys, owner string, fence int64, ttl time.Duration, before protocol.State) error {
	var x protocol.KindArgs
	switch k.Kind {
	case protocol.ElectionKind:
		x.Value = "dlocktest.Steal"
	case protocol.SemKind:
		i := slices.IndexFunc(before.Holders, func(h protocol.Hold) bool { return h.Owner == owner })
		if i < 0 {
			return errs.Op(nil, nil, "the lease held no permits when it was read")
		}
		x.Permits, x.Total = before.Holders[i].Permits, before.Permits
	}
	thief := "dlocktest.Steal:" + e.id + "." + strconv.FormatUint(thieves.Add(1), 10)
	if _, err := e.backend.Acquire(ctx, *k, thief, ttl, 0, x); err != nil {
		return errs.Op(nil, err, "take the lock for another owner")
	}
	after, err := inspectKeys(ctx, e, *k)
	if err != nil {
		return errs.Op(nil, err, "read the lock")
	}
	if !slices.ContainsFunc(after.Holders, func(h protocol.Hold) bool { return h.Owner != owner && h.Fence > fence }) {
		return errs.Op(nil, nil, "no other owner holds the lock with a fence above %d (holders: %+v)", fence, after.Holders)
	}
	return nil
}

// inspectKeys reads the lock k as Client.Inspect reads it.
func inspectKeys(ctx context.Context, e *engine, k protocol.Keys) (protocol.State, error) {
	keys, code := k.InspectArgs()
	return e.admin.Inspect(ctx, keys, code, InspectLimit)
}
