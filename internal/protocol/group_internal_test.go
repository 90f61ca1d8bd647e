package protocol

import (
	"context"
	"testing"
	"time"
)

// TestShareRetriedAndLate: a Group's result is left by its runner only,
// once, and a copy of the request that runs again, or late (after the
// runner released, or after a later run left its own), changes nothing.
func TestShareRetriedAndLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n, rdb := testNode(t)
	k := NewKeys("dlock:", GroupKind, "g/k")
	ttl := 10 * time.Second
	take := func(owner string) AcquireResult {
		t.Helper()
		r, err := n.Acquire(ctx, k, owner, ttl, 0, KindArgs{})
		if err != nil || r.Fence == 0 {
			t.Fatalf("%s's acquire: %+v, %v", owner, r, err)
		}
		return r
	}
	release := func(owner string, r AcquireResult) {
		t.Helper()
		if _, err := n.Release(ctx, k, ReleaseArgs{Owner: owner, Fence: r.FenceArg, Mode: ReleaseLast, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	share := func(owner string, fence int64, v string, want int64) {
		t.Helper()
		code, err := n.Share(ctx, k, owner, fence, Result{Value: v}, time.Minute)
		if err != nil || code != want {
			t.Fatalf("%s shares %q with fence %d: %d, %v; want %d", owner, v, fence, code, err, want)
		}
	}
	read := func() Result {
		t.Helper()
		r, err := n.GroupResult(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	if r := read(); r.Fence != 0 {
		t.Fatalf("a result before any run: %+v", r)
	}
	a := take("a")
	share("b", a.Fence, "not the runner's", CodeOther)
	if r := read(); r.Fence != 0 {
		t.Fatalf("a caller that does not hold the lease left %+v", r)
	}
	share("a", a.Fence, "first", CodeDone)
	first := read()
	if first.Fence != a.Fence || first.Value != "first" || first.Failed {
		t.Fatalf("the runner's result reads %+v", first)
	}
	time.Sleep(5 * time.Millisecond)
	share("a", a.Fence, "first", CodeDone) // a retry
	if r := read(); r.Fence != a.Fence || r.Value != "first" || r.Age < first.Age+5*time.Millisecond {
		t.Fatalf("after a retry the result reads %+v, want it as the first copy left it", r)
	}
	release("a", a)
	share("a", a.Fence+1, "late, of a fence that is not its", CodeOther)

	b := take("b")
	share("b", b.Fence, "second", CodeDone)
	release("b", b)
	share("a", a.Fence, "first", CodeOther) // a's first copy, very late
	if r := read(); r.Fence != b.Fence || r.Value != "second" {
		t.Fatalf("a late copy of an earlier run's share left %+v, want the later run's", r)
	}
	if pttl := rdb.PTTL(ctx, ResultKey(k)).Val(); pttl <= 0 || pttl > time.Minute {
		t.Errorf("the result expires in %v, want within its keep time", pttl)
	}
}
