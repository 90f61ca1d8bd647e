package protocol

// The acquire request: take a lock or register as its waiter, or re-enter
// a hold, and what the reply says.

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// AcquireResult is what an acquire script answered, decoded.
type AcquireResult struct {
	Fence     int64         // > 0 when the lock was taken
	FenceArg  FenceArg      // Fence as the reply boxed it
	Reentered bool          // the owner's hold count went up
	Gone      bool          // re-entry asked, but the owner holds nothing; for a Semaphore, more permits asked than its total
	Pttl      time.Duration // when held by another: how long until that may change, -1ms if unknown
	// Already: the lock was taken by an earlier copy of the request (its
	// reply lost); Left is what was left of that lease when the script ran
	// (0 if it was about to lapse; -1ms if the key has no expiry): the lease
	// ends no sooner than Left after this request was sent. Otherwise the
	// request took it, and its lease runs TTL from its run.
	Already bool
	Left    time.Duration
	// Floor, when held by another, if the script tells it: every fence a
	// release grants the caller from then on is above it (fence_floor); at is
	// the server's time then, in µs.
	Floor, At int64
	// NotReplicated: the hold was granted or re-entered, but fewer replicas
	// than WithWaitReplicas asks for acknowledged it (an ErrNotReplicated).
	NotReplicated error
	// Sem, when a Semaphore's permits were not taken and the caller asked
	// why (SemWhy): the semaphore's total and use as the script saw them.
	Sem *SemTotal
	// Doubt, if not 0, is the deadline (the server's time, in ms) of a copy
	// of the request whose outcome is unknown (its reply was lost): it may
	// have run, or may still reach Redis until then. The owner's release, if
	// it comes sooner, passes it on (ReleaseArgs.Void), so that such a copy
	// takes nothing. Set with an error too.
	Doubt int64
	// Short, if above 0, is how long the lease taken is sure to last from
	// when the request was sent: its first expiry, short and absolute, which
	// bounds what a late copy can hold (a Plain backend's take). The lease
	// begins as a grant does, lengthened to the TTL at once.
	Short time.Duration
	// Expired: the request reached Redis after its deadline, or after its
	// owner ended, and changed nothing. Acquire sends a new one; a RedLock's
	// member may answer so.
	Expired bool
}

// Acquire runs k's acquire script: one round trip, unless a copy's reply is
// lost (it is sent again, as the Redis client would) or the request reaches
// Redis after its deadline (it is sent again with a new one). If the lock is
// held and register is above zero, owner is registered as a waiter for that
// long. x are the kind's own arguments.
func (n *Node) Acquire(ctx context.Context, k Keys, owner string, ttl, register time.Duration, x KindArgs) (AcquireResult, error) {
	var doubt int64
	for tries := 0; ; tries++ {
		dl, dlArg := n.clock.deadline()
		var rep evalReply
		switch {
		case k.Kind.order != nil && k.Kind.own == ownNone && register == 0:
			// A Mutex's or a FairMutex's take that does not queue sends the
			// owner, the TTL and the deadline alone: Redis makes a Lua
			// string of every argument before the script runs, and the
			// script needs no others then.
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", owner, msArg(ttl), dlArg)
		case k.Kind.order != nil && k.Kind.own == ownNone:
			// One that queues: the grant lease, boxed once per TTL, and the
			// channel and order, for a grant it may make (acquire.lua).
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", owner, msArg(ttl), dlArg,
				string(takeMode), register.Milliseconds(), grantArg(ttl), k.channelArg, k.Kind.order)
		default:
			rep = n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, owner, ttl, dlArg, takeMode, register.Milliseconds(), x)...)
		}
		if rep.doubt {
			doubt = dl
		}
		r, err := n.acquired(ctx, k, rep)
		r.Doubt = doubt
		if err == nil && r.Expired && tries < expiredTries && ctx.Err() == nil {
			continue
		}
		return r, err
	}
}

// expiredTries is how many times an acquire that reached Redis after its
// deadline is sent again with a new one, the node's clock having learned the
// server's from the answer.
const expiredTries = 3

// Reenter runs k's acquire script to add a hold of owner, which then has
// count holds: one round trip. x are the kind's own arguments, as for
// acquire.
func (n *Node) Reenter(ctx context.Context, k Keys, owner string, ttl time.Duration, count int, x KindArgs) (AcquireResult, error) {
	_, dl := n.clock.deadline()
	r, err := n.acquired(ctx, k, n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, owner, ttl, dl, reenterMode, int64(count), x)...))
	if err == nil && r.Expired {
		// Its deadline passed on the way: the count is set again by the next
		// re-entry or release that reaches Redis; the hold is there.
		r = AcquireResult{Reentered: true}
	}
	return r, err
}

// acquireArgs are the ARGV of k's acquire script: the five every acquire
// script takes (owner, ttl, deadline, mode, and the registration or the hold
// count), then a Mutex's, FairMutex's or Election's waiter's grant lease,
// the channel stem and the order, and the kind's own arguments (own).
func acquireArgs(k Keys, owner string, ttl time.Duration, deadline any, mode acquireMode, n int64, x KindArgs) []any {
	args := append(make([]any, 0, 10), owner, msArg(ttl), deadline, string(mode), n)
	if k.Kind.order != nil {
		args = append(args, grantArg(ttl), k.channelArg, k.Kind.order)
	}
	switch k.Kind.own {
	case ownRead:
		args = append(args, "r", x.Writer)
	case ownWrite:
		args = append(args, "w", "")
	case ownPermits:
		args = append(args, x.Permits, x.Total)
	case ownValue:
		args = append(args, x.Value)
	}
	return args
}

// acquired decodes the reply of k's acquire script, or its error, and learns
// the server's clock from it where it tells it.
func (n *Node) acquired(ctx context.Context, k Keys, rep evalReply) (AcquireResult, error) {
	var r AcquireResult
	err := rep.err
	if err == nil {
		r, err = decodeAcquire(rep.v)
	}
	if err != nil {
		n.Failed(err)
		return AcquireResult{}, errs.Op(nil, n.foreign(ctx, k, err), "acquire %q", k.Name)
	}
	if r.At > 0 {
		n.clock.learn(r.At)
	}
	return r, nil
}

// decodeAcquire decodes an acquire script's reply: an integer; for "held"
// the time to wait, the fence floor and the server time (held_reply); for
// "taken already" the fence and what is left of the lease.
func decodeAcquire(v any) (AcquireResult, error) {
	reply := v
	switch v := v.(type) {
	case int64:
		switch {
		case v > 0:
			return AcquireResult{Fence: v, FenceArg: FenceArg{reply}}, nil
		case v == replyReentered:
			return AcquireResult{Reentered: true}, nil
		case v == replyGone:
			return AcquireResult{Gone: true}, nil
		}
		return AcquireResult{Pttl: time.Duration(-v-heldOffset) * time.Millisecond}, nil
	case []any:
		switch len(v) {
		case 2:
			c, ok1 := v[0].(int64)
			x, ok2 := v[1].(int64)
			switch {
			case ok1 && ok2 && c == 0:
				// Too late, or its owner ended: nothing done.
				return AcquireResult{Expired: true, At: x}, nil
			case ok1 && ok2 && c > 0 && x >= -1:
				// Taken by an earlier copy, x ms left (-1: no expiry).
				return AcquireResult{Fence: c, FenceArg: FenceArg{v[0]}, Already: true, Left: time.Duration(x) * time.Millisecond}, nil
			}
		case 3:
			c, ok1 := v[0].(int64)
			f, ok2 := v[1].(int64)
			at, ok3 := v[2].(int64)
			if ok1 && ok2 && ok3 && c <= 1-heldOffset {
				return AcquireResult{Pttl: time.Duration(-c-heldOffset) * time.Millisecond, Floor: f, At: at}, nil
			}
		case 5:
			// A Semaphore's "not acquired", with why (SemWhy).
			var n [5]int64
			ok := true
			for i, x := range v {
				n[i], ok = x.(int64)
				if !ok {
					break
				}
			}
			if ok && n[0] <= 1-heldOffset {
				return AcquireResult{Pttl: time.Duration(-n[0]-heldOffset) * time.Millisecond,
					Sem: &SemTotal{Used: n[1], Total: n[2], Ahead: n[3], Set: n[4] == 1}}, nil
			}
		}
	}
	return AcquireResult{}, fmt.Errorf("unexpected reply %v from the acquire script", v)
}
