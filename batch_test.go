package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// pipelineCounter is a go-redis hook that counts the pipelines of script
// calls a client sends, and the commands in the largest.
type pipelineCounter struct {
	pipelines, largest atomic.Int64
}

func (pc *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (pc *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (pc *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "evalsha" {
			return next(ctx, cmds) // a connection's handshake
		}
		pc.pipelines.Add(1)
		for n := int64(len(cmds)); ; {
			l := pc.largest.Load()
			if n <= l || pc.largest.CompareAndSwap(l, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestBatching: a lone caller's requests go one by one; the acquires and
// releases of 64 goroutines on one Client go together in pipelines, which
// go-redis sends again whole when a request or reply in them is lost; and
// through all of it, and late replies, each lock has one holder at a time,
// its fences rise, and every Unlock succeeds but those that cannot tell
// their retried release from a loss, which say so.
func TestBatching(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	direct := srv.Client(t)
	loadScripts(t, direct)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	var pc pipelineCounter
	rdb.AddHook(&pc)
	// A grant's lease is a tenth of the TTL, 1 s at most, and the grantee's
	// lengthening extend may share a pipeline with a delayed reply: at 30 s
	// the grant lasts 1 s, which a loaded machine does not use up.
	const ttl = 30 * time.Second
	c := clientOn(t, rdb, dlock.WithTTL(ttl))
	ctx := context.Background()

	for range 20 {
		l, err := c.Mutex("alone").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := pc.pipelines.Load(); n != 0 {
		t.Fatalf("a lone caller's requests went in %d pipelines", n)
	}

	// Lost requests and replies, and late replies, inside pipelines once the
	// goroutines crowd in.
	var drops []*faultproxy.Injection
	for _, op := range []string{"acquire", "release"} {
		for _, f := range []faultproxy.Fault{faultproxy.DropReply, faultproxy.DropRequest, faultproxy.DelayReply} {
			drops = append(drops, p.Inject(faultproxy.Rule{Match: script(op), Fault: f, Delay: 50 * time.Millisecond, Times: 3}))
		}
	}
	alarms := crowd(t, c, true)
	t.Logf("%d Unlocks sent again after a lost reply could not be told from a loss", alarms)
	for _, in := range drops {
		checkHit(t, in)
	}
	if pc.pipelines.Load() == 0 || pc.largest.Load() < 2 {
		t.Errorf("%d pipelines, the largest of %d commands: the goroutines' requests did not go together", pc.pipelines.Load(), pc.largest.Load())
	}
	// Each name keeps its free state, with its last fence, until the lease
	// that freed it would have ended, or, if it records owners whose
	// acquire's reply was lost, until that request's deadline; none is
	// held.
	for _, k := range stateKeys(direct, "dlock:{n*}") {
		s := readLock(t, direct, k)
		if s.Held() {
			t.Errorf("%s still held: %+v", k, s)
		}
		within := ttl
		if s.Records != "" {
			within = max(ttl, dlock.RequestTTL+time.Second)
		}
		if p := direct.PTTL(ctx, k).Val(); p != -2*time.Nanosecond && (p <= 0 || p > within) { // -2: expired since listed
			t.Errorf("%s left with PTTL %v, want a TTL within %v: %+v", k, p, within, s)
		}
	}
	t.Logf("%d pipelines, the largest of %d commands", pc.pipelines.Load(), pc.largest.Load())
}

// TestBatchingCluster: on a Cluster, a pipeline of the crowd's requests
// spans the primaries (go-redis splits it by slot), and each lock still has
// one holder at a time and rising fences.
func TestBatchingCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	rdb := cl.Client(t)
	var pc pipelineCounter
	rdb.AddHook(&pc)
	c := clientOn(t, rdb, dlock.WithTTL(5*time.Second))
	crowd(t, c, false)
	if pc.pipelines.Load() == 0 || pc.largest.Load() < 2 {
		t.Errorf("%d pipelines, the largest of %d commands: the goroutines' requests did not go together", pc.pipelines.Load(), pc.largest.Load())
	}
	t.Logf("%d pipelines, the largest of %d commands", pc.pipelines.Load(), pc.largest.Load())
}

// crowd has 64 goroutines take and release 16 Mutexes, 4 on each, 40 times
// each, and fails the test if a lock has two holders at once, a fence does
// not rise, or a Lock or Unlock fails. An Unlock whose release was sent
// again after a lost reply, and found the lock gone on further than its
// state shows, answers that it may be a false alarm (the keys can no longer
// tell it from a loss): with lostReleases set, such answers are counted and
// returned instead of failing the test.
func crowd(t *testing.T, c *dlock.Client, lostReleases bool) (falseAlarms int64) {
	t.Helper()
	ctx := context.Background()
	const names, perName, rounds = 16, 4, 40
	type guard struct {
		holders atomic.Int32
		mu      sync.Mutex
		fence   int64
	}
	guards := make([]guard, names)
	var wg sync.WaitGroup
	var failures, alarms atomic.Int64
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	for g := range names * perName {
		wg.Go(func() {
			i := g % names
			m := c.Mutex(fmt.Sprintf("n%d", i))
			gd := &guards[i]
			for range rounds {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := m.Lock(wctx)
				cancel()
				if err != nil {
					fail("Lock n%d: %v", i, err)
					return
				}
				if h := gd.holders.Add(1); h != 1 {
					fail("n%d: %d holders at once", i, h)
				}
				gd.mu.Lock()
				if l.Fence() <= gd.fence {
					fail("n%d: fence %d after %d", i, l.Fence(), gd.fence)
				}
				gd.fence = l.Fence()
				gd.mu.Unlock()
				gd.holders.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					if lostReleases && errors.Is(err, dlock.ErrLockLost) && strings.Contains(err.Error(), "false alarm") {
						alarms.Add(1)
						continue
					}
					fail("Unlock n%d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	return alarms.Load()
}
