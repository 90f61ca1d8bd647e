package protocol

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestAcquireAtItsDeadline: an acquire that reaches Redis in the very
// millisecond of its deadline changes nothing, in every acquire script. A
// release records an owner whose acquire is still out until that deadline,
// and a record counts while its deadline is ahead of the server's time: a
// copy let in at its deadline would find the record lapsed, and take the
// lock after its owner's Unlock (the server's time in ms is TIME floored,
// and a Redis client that gives up after as long as RequestTTL sends its
// retry, and the Unlock, right at that deadline).
//
// Each try reads TIME and sends the acquire with that millisecond as its
// deadline, so it runs in that millisecond or later: it must be refused
// every time, on a free lock and on one another owner holds (a state the
// scripts read in full, as they do one with records).
func TestAcquireAtItsDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, rdb := testNode(t)
	kinds := []struct {
		k *Layout
		x KindArgs
	}{
		{MutexKind, KindArgs{}},
		{FairKind, KindArgs{}},
		{SemKind, KindArgs{Permits: 1, Total: 1}},
		{RWReadKind, KindArgs{}},
		{RWWriteKind, KindArgs{}},
		{RedMutexKind, KindArgs{}},
	}
	for i, kind := range kinds {
		for _, held := range []bool{false, true} {
			for _, register := range []int64{0, 1000} {
				what := fmt.Sprintf("%s%s (held %t, register %d)", kind.k.Space, kind.k.Name, held, register)
				k := NewKeys("dlock:", kind.k, fmt.Sprintf("at-deadline-%d-%t-%d", i, held, register))
				if held {
					tm, err := rdb.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					rep := n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, "h", 10*time.Second, tm.UnixMilli()+10000, takeMode, 0, kind.x)...)
					if r, err := n.acquired(ctx, k, rep); err != nil || r.Fence == 0 {
						t.Fatalf("%s: the holder's acquire: %+v, %v", what, r, err)
					}
				}
				for try := range 20 {
					tm, err := rdb.Time(ctx).Result()
					if err != nil {
						t.Fatal(err)
					}
					dl := tm.UnixMilli()
					rep := n.eval(ctx, n.scripts[k.Kind.acquire], k.AcquireKeys, "", acquireArgs(k, "o", 10*time.Second, dl, takeMode, register, kind.x)...)
					r, err := n.acquired(ctx, k, rep)
					if err != nil {
						t.Fatalf("%s, try %d: %v", what, try, err)
					}
					if !r.Expired {
						t.Fatalf("%s, try %d: an acquire at its deadline (%d ms) answered %+v, want nothing done", what, try, dl, r)
					}
				}
				if keys, err := rdb.Keys(ctx, k.Tag+"*").Result(); err != nil || (!held && len(keys) != 0) {
					t.Fatalf("%s: keys %v (%v) after acquires that were refused, want none", what, keys, err)
				}
			}
		}
	}
}
