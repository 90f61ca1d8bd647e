package protocol

// Renewal and Extend: many leases lengthened in one request, and the time
// a lease has left.

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// ExtendItem is one lease in an extend call.
type ExtendItem struct {
	K     Keys
	Owner string
	TTL   time.Duration
	// Exact: the lease lapses ttl from now even if it would have lapsed later
	// (Lease.Extend); otherwise it is only lengthened (a renewal).
	Exact bool
	// Gen is how many Extends of the lease had been sent when this request
	// was, itself included: Redis ignores a request of an earlier generation
	// than the latest Extend it ran (codeStale), whenever it arrives.
	Gen uint32
	// Fence is the lease's fence, and Lease, if not nil, tells whether its
	// owner still holds it. A RedLock takes the lock again, for Owner and
	// with a fence at least Fence, on a member where the lock is gone and
	// free (one restarted empty), while Lease says the owner holds it. A
	// node uses neither.
	Fence int64
	Lease Holder
}

// Holder tells whether a lease is still its owner's.
type Holder interface {
	// Held reports whether the owner holds the lease: it has not ended, and
	// its owner has not begun to give it up. Once false, it stays false.
	Held() bool
}

// MaxBatch is the most leases renewed by one script call, and by one
// pipeline. A renewal pass takes the leases due by then, not a multiple of
// maxBatch, so its last call is a partial one: at 128, 10,000 leases on one
// server take about 80 round trips a period, under one per 100 leases; each
// call keeps Redis busy for about a millisecond.
const MaxBatch = 128

// Extend runs extend.lua once over items, whose keys must all be in one
// hash slot if the node is a Cluster: one round trip. It returns a result
// code per item.
func (n *Node) Extend(ctx context.Context, items []ExtendItem) ([]int64, error) {
	ks, args := extendArgs(items)
	codes, err := int64sOf(n.run(ctx, n.scripts[ScriptExtend], false, ks, args...))
	return n.extendResult(items, codes, err)
}

// ExtendAll runs extend.lua once per call, all in one pipeline: one round
// trip per server. It returns the result codes and the error of each call.
func (n *Node) ExtendAll(ctx context.Context, calls [][]ExtendItem, rec *Record) ([][]int64, []error) {
	codes, errs := make([][]int64, len(calls)), make([]error, len(calls))
	if len(calls) == 1 && rec == nil {
		codes[0], errs[0] = n.Extend(ctx, calls[0])
		return codes, errs
	}
	s := n.scripts[ScriptExtend]
	run := func(eval bool, todo []int) {
		cmds := make([]rclient.Cmd, len(todo), len(todo)+1)
		for j, i := range todo {
			ks, args := extendArgs(calls[i])
			a := make([]any, 0, 3+len(ks)+len(args))
			if eval {
				a = append(a, "eval", srcArg(s), len(ks))
			} else {
				a = append(a, "evalsha", shaArg(s), len(ks))
			}
			for _, k := range ks {
				a = append(a, k)
			}
			cmds[j].Args = append(a, args...)
		}
		set := rec != nil && !rec.Sent
		if set {
			// The record rides with the round (on a Cluster, with the
			// batch of its own server), once.
			cmds = append(cmds, rclient.Cmd{Args: []any{"set", rec.Key, rec.Value, "px", rec.TTL.Milliseconds()}})
			rec.Sent = true
		}
		if err := n.c.Pipe(ctx, cmds); err != nil {
			for j := range cmds {
				cmds[j].Err = err
			}
		}
		if set {
			if err := cmds[len(cmds)-1].Err; err != nil {
				n.Failed(err)
				rec.Err = fmt.Errorf("write %s: %w", rec.Key, err)
			}
		}
		for j, i := range todo {
			v, err := int64sOf(cmds[j].Reply, cmds[j].Err)
			codes[i], errs[i] = n.extendResult(calls[i], v, err)
		}
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	run(false, all)
	// A server that does not know the script yet (after a restart, a
	// failover or SCRIPT FLUSH) is sent its body.
	var again []int
	for i, err := range errs {
		if noScript(err) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		run(true, again)
	}
	return codes, errs
}

func extendArgs(items []ExtendItem) (ks []string, args []any) {
	nk := 0
	for _, it := range items {
		nk += len(it.K.leaseKeys) + 1
	}
	ks = make([]string, 0, nk)
	args = make([]any, 0, 6*len(items))
	for _, it := range items {
		how := extendLonger
		if it.Exact {
			how = extendExact
		}
		ks = append(ks, it.K.leaseKeys...)
		n := len(it.K.leaseKeys)
		kind := it.K.Kind.leaseIn.arg()
		if it.K.Kind.extendsHash {
			ks = append(ks, it.K.extendsKey())
			n++
			kind = leaseInRedLock
		}
		args = append(args, kind, it.Owner, it.TTL.Milliseconds(), how.arg(), it.Gen, n)
	}
	return ks, args
}

func (n *Node) extendResult(items []ExtendItem, codes []int64, err error) ([]int64, error) {
	if err != nil {
		n.Failed(err)
	}
	switch {
	case err != nil && len(items) == 1:
		return nil, errs.Op(nil, err, "extend %q", items[0].K.Name)
	case err != nil:
		return nil, errs.Op(nil, err, "extend %d leases", len(items))
	case len(codes) != len(items):
		return nil, errs.Op(nil, nil, "extend %d leases: unexpected reply %v", len(items), codes)
	}
	return codes, nil
}

// TTL runs ttl.lua: whether owner holds its lease on k (codeDone; codeOther
// or codeGone if not) and, if it does, how long the lease has left (-1ms: no
// expiry).
func (n *Node) TTL(ctx context.Context, k Keys, owner string) (left time.Duration, code int64, err error) {
	ms, err := int64Of(n.run(ctx, n.scripts[scriptTTL], false, k.leaseKeys[:1], owner, k.Kind.leaseIn.arg()))
	switch {
	case err != nil:
		return 0, 0, errs.Op(nil, n.foreign(ctx, k, err), "ttl %q", k.Name)
	case ms == ttlOther:
		return 0, CodeOther, nil
	case ms == ttlGone:
		return 0, CodeGone, nil
	}
	return time.Duration(ms) * time.Millisecond, CodeDone, nil
}
