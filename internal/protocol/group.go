package protocol

// A Group key: a lease taken and granted in a FairMutex's order, by the
// Mutex's scripts, beside a result hash that two scripts of its own write
// (group_share.lua, while the runner holds the lease) and read
// (group_result.lua).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
)

// GroupKind is the lease of a Group's key: whoever holds it runs the key's
// function.
var GroupKind = &Layout{Name: "Group", Space: "group:", acquire: ScriptAcquire, release: scriptRelease,
	acquireKeys: []string{"lock", "waiters", "alive"},
	releaseKeys: []string{"lock", "waiters", "alive"},
	leaseKeys:   []string{"lock"},
	leaseIn:     leaseInState,
	Handoff:     HandoffGrant, order: orderKeep}

// ResultKey names the hash that keeps a Group key's latest result.
func ResultKey(k Keys) string { return k.Tag + ":result" }

// Groups is a Backend that keeps the results of Group keys.
type Groups interface {
	// GroupResult runs group_result.lua, read-only: k's latest result.
	GroupResult(ctx context.Context, k Keys) (Result, error)
	// Share runs group_share.lua: owner, holding k's lease with fence,
	// leaves r there for keep. It returns CodeDone, or CodeOther if owner
	// does not hold the lease with that fence.
	Share(ctx context.Context, k Keys, owner string, fence int64, r Result, keep time.Duration) (int64, error)
}

// Result is a Group key's result as Redis keeps it. Fence is 0 if there is
// none.
type Result struct {
	Fence  int64         // the fence of the run that made it
	Age    time.Duration // how long ago it was left
	Failed bool          // Value is an error's message
	Value  string
}

// GroupResult reads k's latest result (EVALSHA_RO).
func (n *Node) GroupResult(ctx context.Context, k Keys) (Result, error) {
	v, err := sliceOf(n.run(ctx, n.scripts[scriptGroupResult], true, []string{ResultKey(k)}))
	if err != nil {
		n.Failed(err)
		return Result{}, errs.Op(nil, n.foreign(ctx, k, err), "read the result of %q", k.Name)
	}
	r, err := decodeResult(v)
	if err != nil {
		return Result{}, errs.Op(nil, err, "read the result of %q", k.Name)
	}
	return r, nil
}

// decodeResult decodes group_result.lua's reply.
func decodeResult(v []any) (Result, error) {
	if len(v) == 0 {
		return Result{}, nil
	}
	if len(v) != 4 {
		return Result{}, fmt.Errorf("unexpected reply %v", v)
	}
	fs, ok1 := v[0].(string)
	age, ok2 := v[1].(int64)
	failed, ok3 := v[2].(string)
	value, ok4 := v[3].(string)
	fence, err := strconv.ParseInt(fs, 10, 64)
	if !ok1 || !ok2 || !ok3 || !ok4 || err != nil || fence <= 0 {
		return Result{}, fmt.Errorf("unexpected reply %v", v)
	}
	return Result{Fence: fence, Age: time.Duration(age) * time.Millisecond, Failed: failed == "1", Value: value}, nil
}

// Share runs group_share.lua: owner's result as the runner of k with fence
// is left for keep, unless owner no longer holds the lease.
func (n *Node) Share(ctx context.Context, k Keys, owner string, fence int64, r Result, keep time.Duration) (int64, error) {
	failed := "0"
	if r.Failed {
		failed = "1"
	}
	code, err := n.eval(ctx, n.scripts[scriptGroupShare], []string{k.AcquireKeys[0], ResultKey(k)}, "",
		owner, fence, r.Value, failed, keep.Milliseconds()).Int64()
	if err != nil {
		n.Failed(err)
		return 0, errs.Op(nil, n.foreign(ctx, k, err), "share the result of %q", k.Name)
	}
	return code, nil
}
