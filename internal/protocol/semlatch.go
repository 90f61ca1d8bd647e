package protocol

// A Semaphore's total and a CountDownLatch's count: the requests beyond
// acquire and release.

import (
	"context"
	"strconv"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// SemTotal is a Semaphore's total as Redis holds it, and its use.
type SemTotal struct {
	Total int64 // permits in all; 0 if Redis holds none
	Set   bool  // Total is the one SetPermits stored, not the first caller's
	Used  int64 // the permits live holders hold
	// Ahead (an acquire's answer): the permits live waiters queued before
	// the caller want, counted as far as leaves the caller no room.
	Ahead int64
}

// Semaphore runs sem_release.lua in one of its own modes, with total as its
// argument: the new total, or the one to use when none is stored. id is the
// call's own, so that a retried Delete answers as it did. The script's
// release modes take a call marker after the semaphore's keys, which it
// never reads; these modes are sent one too, so that every call has the
// script's layout.
func (n *Node) Semaphore(ctx context.Context, k Keys, id string, mode SemMode, total int64) (int64, error) {
	v, err := int64Of(n.run(ctx, n.scripts[k.Kind.release], false, k.releaseKeys,
		id, k.channelArg, string(mode), 0, total, remnantTTLArg))
	if err != nil {
		return 0, errs.Op(nil, n.foreign(ctx, k, err), "semaphore %q", k.Name)
	}
	return v, nil
}

// SemTotal reads k's total as sem_acquire.lua does: the one SetPermits
// stored (its "total" key), else the first caller's (the "permits" field of
// its "semaphore" hash), 0 if neither is there. Plain reads in one round
// trip, which a replica could serve and a user allowed only to read keys may
// send. Used and Ahead are left 0.
func (n *Node) SemTotal(ctx context.Context, k Keys) (SemTotal, error) {
	cmds := []rclient.Cmd{
		{Args: []any{"get", k.Tag + keyNames["total"]}},
		{Args: []any{"hget", k.Tag, semPermitsField}},
	}
	if err := n.c.Pipe(ctx, cmds); err != nil {
		return SemTotal{}, errs.Op(nil, err, "total of semaphore %q", k.Name)
	}
	st := SemTotal{Set: true}
	for _, c := range cmds {
		if c.Err == nil && c.Reply == nil {
			st.Set = false
			continue
		}
		v, err := int64Of(c.Reply, c.Err)
		if err != nil {
			return SemTotal{}, errs.Op(nil, n.foreign(ctx, k, err), "total of semaphore %q", k.Name)
		}
		st.Total = v
		return st, nil
	}
	return st, nil
}

// semPermitsField is the field of a Semaphore's hash that holds the first
// caller's total (sem_acquire.lua).
const semPermitsField = "permits"

// Latch runs latch.lua in mode. id is the call's own, the same in each run
// of the call, by which the latch's keys tell a retry.
func (n *Node) Latch(ctx context.Context, k Keys, id string, mode LatchMode, count int64) (int64, error) {
	v, err := int64Of(n.run(ctx, n.scripts[scriptLatch], false, []string{k.Tag, k.Tag + latchOpenedSuffix},
		string(mode), LatchChannel(k), count, id, remnantTTLArg))
	if err != nil {
		return 0, errs.Op(nil, n.foreign(ctx, k, err), "latch %q", k.Name)
	}
	return v, nil
}

// LatchChannel is where a latch's opening is published.
func LatchChannel(k Keys) string { return k.Tag + LatchSuffix }

const (
	LatchSuffix = ":zero"
	// latchOpenedSuffix names the record of a latch's last opening
	// (latch.lua's KEYS[2]).
	latchOpenedSuffix = ":opened"
	// latchCountField is the field of the latch's hash that holds its count.
	latchCountField = "count"
)

// LatchCount reads a latch's count: 0 when it has none.
func (n *Node) LatchCount(ctx context.Context, k Keys) (int64, error) {
	r, err := n.c.Do(ctx, "hget", k.Tag, latchCountField)
	if wrongType(err) {
		// A latch armed by an earlier version of latch.lua, a string holding
		// its count, until a CountDown, TrySetCount or Delete makes it a
		// hash.
		r, err = n.c.Do(ctx, "get", k.Tag)
	}
	if err != nil {
		return 0, errs.Op(nil, n.foreign(ctx, k, err), "count of latch %q", k.Name)
	}
	if r == nil {
		return 0, nil
	}
	s, _ := r.(string)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errs.Op(nil, err, "count of latch %q: %q in Redis", k.Name, s)
	}
	return v, nil
}
