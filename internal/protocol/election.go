package protocol

// An Election: a lease taken and granted in a FairMutex's order, by the
// Mutex's scripts, with one more key, the leader record, that those scripts
// write when they grant the lease (st_hold in lua/lib_state.lua), and two scripts of
// its own that read it (leader.lua) and change its value (proclaim.lua).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// ElectionKind is an Election's lease. Its queue keeps a candidate's value
// in the candidate's entry, from which the release that grants it the lease
// writes the leader record; its renewals lengthen the record with the lock.
var ElectionKind = &Layout{Name: "Election", Space: "election:", acquire: ScriptAcquire, release: scriptRelease,
	acquireKeys: []string{"lock", "waiters", "alive", "leader"},
	releaseKeys: []string{"lock", "waiters", "alive", "leader"},
	leaseKeys:   []string{"lock", "leader"},
	leaseIn:     leaseInState,
	Handoff:     HandoffGrant, order: orderKeep, own: ownValue}

// LeaderKey names an Election's leader record. Its changes are published,
// as "*", on the shard channel of the same name.
func LeaderKey(k Keys) string { return k.AcquireKeys[3] }

// LeaderState is an Election's leader as leader.lua reads it. Term is 0
// when nobody leads.
type LeaderState struct {
	Term  int64
	Since int64 // server time when the term began, in µs
	Value string
	Seq   int64         // the last Proclaim of the term that Redis ran, 0 if none
	Left  time.Duration // what the leader's lease has left
}

// Leader runs leader.lua on k's lock and leader record, read-only
// (EVALSHA_RO).
func (n *Node) Leader(ctx context.Context, k Keys) (LeaderState, error) {
	v, err := sliceOf(n.run(ctx, n.scripts[ScriptLeader], true, []string{k.AcquireKeys[0], LeaderKey(k)}))
	if err != nil {
		n.Failed(err)
		return LeaderState{}, errs.Op(nil, n.foreign(ctx, k, err), "read the leader of %q", k.Name)
	}
	st, err := decodeLeader(v)
	if err != nil {
		return LeaderState{}, errs.Op(nil, err, "read the leader of %q", k.Name)
	}
	return st, nil
}

// decodeLeader decodes leader.lua's reply.
func decodeLeader(v []any) (LeaderState, error) {
	if len(v) == 1 {
		if c, ok := v[0].(int64); ok && c == ttlGone {
			return LeaderState{}, nil
		}
	}
	if len(v) != 5 {
		return LeaderState{}, fmt.Errorf("unexpected reply %v", v)
	}
	left, ok := v[0].(int64)
	term, err1 := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
	since, err2 := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
	value, ok2 := v[3].(string)
	seq, err3 := strconv.ParseInt(fmt.Sprint(v[4]), 10, 64)
	if !ok || !ok2 || err1 != nil || err2 != nil || err3 != nil || term <= 0 {
		return LeaderState{}, fmt.Errorf("unexpected reply %v", v)
	}
	return LeaderState{Term: term, Since: since, Value: value, Seq: seq, Left: time.Duration(left) * time.Millisecond}, nil
}

// Proclaim runs proclaim.lua: owner's value as the leader of k in term
// becomes value, unless a Proclaim of a later seq of that term ran first. It
// returns CodeDone, or CodeOther or CodeGone if owner does not lead in term.
func (n *Node) Proclaim(ctx context.Context, k Keys, owner string, term int64, seq uint64, value string) (int64, error) {
	code, err := n.eval(ctx, n.scripts[ScriptProclaim], []string{k.AcquireKeys[0], LeaderKey(k)}, "",
		owner, term, strconv.FormatUint(seq, 10), value).Int64()
	if err != nil {
		n.Failed(err)
		return 0, errs.Op(nil, n.foreign(ctx, k, err), "proclaim %q", k.Name)
	}
	return code, nil
}
