package protocol

// The release request, and raising a fence key where a lock freed by
// expiry left it lower than a fence already given out.

import (
	"context"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// ReleaseArgs are what a release says besides its lock.
type ReleaseArgs struct {
	Owner string
	Fence FenceArg // the owner's; NoFence if unknown
	Mode  ReleaseMode
	TTL   time.Duration // the lock's: it sets the grant lease of the waiter a freed lock goes to
	Count int           // for ReleaseOne, the holds that remain
	// Void, if not 0, is the deadline (the server's time, in ms) of an
	// acquire of Owner whose outcome is unknown (AcquireResult.Doubt): until
	// then, Redis refuses Owner's acquires, which can only be that one
	// arriving late, since the owner has ended.
	Void int64
}

// Released is what a release script answered: its result code, and whether
// the answer came from a copy sent after one whose outcome is unknown, which
// may have run first: then a code that says the owner held nothing may be
// that first copy's doing.
type Released struct {
	Code    int64
	Retried bool
}

// Release runs k's release script, or for a waiter of a kind of
// release.lua that gives up (ReleaseLeave) leave.lua: one round trip, unless
// a copy's reply is lost (it is sent again, as the Redis client would). It
// returns the result code.
func (n *Node) Release(ctx context.Context, k Keys, a ReleaseArgs) (Released, error) {
	mode := a.Mode
	if mode == ReleaseLastQueued && k.Kind.order == nil {
		mode = ReleaseLast // release.lua alone tells the two apart
	}
	grant := grantArg(a.TTL)
	if k.Kind.Handoff == handoffTell {
		grant = tellArg // the next waiter is told to try, not granted the lock
	}
	var rep evalReply
	switch {
	case k.Kind.order != nil && mode == ReleaseLeave:
		// A waiter that gives up: a request of its own, leave.lua, for the
		// kinds of release.lua; the others' release scripts have a mode.
		if a.Void != 0 {
			rep = n.eval(ctx, n.scripts[scriptLeave], k.releaseKeys, "", a.Owner, k.channelArg, grant, k.Kind.order, a.Void)
		} else {
			rep = n.eval(ctx, n.scripts[scriptLeave], k.releaseKeys, "", a.Owner, k.channelArg, grant, k.Kind.order)
		}
	case a.Void != 0:
		// Rare: an owner whose acquire is still out. Built the plain way.
		var args []any
		switch {
		case k.Kind == SemKind:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Count, remnantTTLArg, a.Fence.arg(), a.Void}
		case k.Kind.order != nil:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order, a.Count, a.Void}
		default:
			args = []any{a.Owner, k.channelArg, mode.arg(), grant, a.Count, a.Fence.arg(), a.Void}
		}
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "", args...)
	case k.Kind == SemKind:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Count, remnantTTLArg, a.Fence.arg())
	case k.Kind.order != nil && mode == ReleaseOne:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order, a.Count)
	case k.Kind.order != nil:
		// release.lua reads a hold count in mode "0" alone: the others
		// do not send one (Redis makes a Lua string of every argument).
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Fence.arg(), k.Kind.order)
	default:
		rep = n.eval(ctx, n.scripts[k.Kind.release], k.releaseKeys, "",
			a.Owner, k.channelArg, mode.arg(), grant, a.Count, a.Fence.arg())
	}
	code, err := rep.Int64()
	if err != nil {
		n.Failed(err)
		return Released{}, errs.Op(nil, n.foreign(ctx, k, err), "release %q", k.Name)
	}
	return Released{Code: code, Retried: rep.retried}, nil
}

// RaiseFence runs raise_fence.lua on a RedLock's member: owner's fence on k
// there becomes at least fence. It returns a result code.
func (n *Node) RaiseFence(ctx context.Context, k Keys, owner string, fence int64, ttl time.Duration) (int64, error) {
	code, err := n.eval(ctx, n.scripts[ScriptRaiseFence], k.fenceKeys(), "", owner, strconv.FormatInt(fence, 10), msArg(ttl), k.Kind.leaseIn.arg()).Int64()
	if err != nil {
		n.Failed(err)
		return 0, errs.Op(nil, err, "raise the fence of %q", k.Name)
	}
	return code, nil
}
