//go:build chaos

package dlock_test

// The chaos run: make chaos, or go test -race -tags chaos -run Chaos -v .
// DLOCK_CHAOS_FOR sets how long the faults go on in each sub-test (default
// 60s).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestChaos: worker processes take one lock (of each kind in turn) over and
// over through a fault proxy that keeps losing, delaying and holding back
// requests and replies, cutting and refusing connections, pausing all
// traffic and making pub/sub connections half-open, while Redis restarts
// empty now and then and the holder's process is stopped past its TTL; near
// the end the proxy holds a few acquires back until their Lock has given
// up. The fenced resource must never see a holder that did not learn within
// a renewal period that it had lost the lock. From the workers' history: a
// section whose release returned nil overlapped no other holder's section
// that it could not share the lock with (checkOverlaps). No ghost hold: an
// acquire that lands after its Lock gave up takes nothing, and one TTL after
// the end Redis holds nothing. After the faults every kind is taken again at
// once, and Redis is left empty once the TTLs have run out.
func TestChaos(t *testing.T) {
	d := 60 * time.Second
	if v := os.Getenv("DLOCK_CHAOS_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	p := workerParams{Name: "chaos", TTL: time.Second, Goroutines: 4, For: d, Extend: true, Permits: 3, ReadShare: 60}
	for _, kind := range []dlock.Kind{dlock.KindMutex, dlock.KindFairMutex} {
		t.Run(string(kind), func(t *testing.T) {
			p := p
			p.Fair = kind == dlock.KindFairMutex
			chaos(t, chaosRun{kind: kind, p: p, restarts: 8}).mustHold(t)
		})
	}
	// 32 goroutines a process over 8 locks: the Client batches their
	// acquires and releases into pipelines, and renews many leases in one
	// call, so that the faults hit requests that share a pipeline.
	t.Run("batched", func(t *testing.T) {
		p := p
		p.Goroutines, p.Names = 32, 8
		chaos(t, chaosRun{kind: dlock.KindMutex, p: p, restarts: 8}).mustHold(t)
	})
	// An RWMutex's holds are reads 60% of the time; a Semaphore's holders
	// take 1 of its 3 permits, or 2 a quarter of the time; an Election's
	// candidates campaign and resign (a Leadership has no Extend).
	for _, kind := range []dlock.Kind{dlock.KindRWMutex, dlock.KindSemaphore, dlock.KindElection} {
		t.Run(string(kind), func(t *testing.T) {
			chaos(t, chaosRun{kind: kind, p: p, restarts: 8}).mustHold(t)
		})
	}
	// The same checks catch a renewal that extends whatever holds the lock:
	// after Redis restarted empty, the holder goes on believing it holds the
	// lock that another has taken. Restarts are made frequent here.
	t.Run("broken-renewal-is-caught", func(t *testing.T) {
		o := chaos(t, chaosRun{kind: dlock.KindMutex, mutant: "extend-ignores-owner", restarts: 40,
			p: workerParams{Name: "chaos", TTL: time.Second, Goroutines: 4, For: min(d, 20*time.Second)}})
		if len(o.total.Unnoticed) == 0 {
			t.Fatal("a renewal that ignores the owner passed the checks")
		}
		t.Logf("caught, as it must be: %d stale writes by holders that never learned", len(o.total.Unnoticed))
	})
	// The invariants catch an Unlock that reports success for a hold it had
	// lost (the workers record nil where it returned ErrLockLost), and a
	// hold left behind that outlives its owner by more than a TTL.
	t.Run("lying-unlock-and-ghost-are-caught", func(t *testing.T) {
		o := chaos(t, chaosRun{kind: dlock.KindMutex, mutants: []string{mutantUnlockHidesLoss, mutantGhostAfterEnd}, restarts: 40,
			p: workerParams{Name: "chaos", TTL: time.Second, Goroutines: 4, For: min(d, 20*time.Second)}})
		var hid []overlapViolation
		for _, v := range o.overlaps {
			if slices.ContainsFunc(v.Earlier, func(s section) bool { return strings.HasPrefix(s.Err, mutantUnlockHidesLoss) }) {
				hid = append(hid, v)
			}
		}
		if len(hid) == 0 {
			t.Errorf("an Unlock that reports success for a lost hold passed the first invariant (%d violations, none of them blaming a hidden loss)", len(o.overlaps))
		} else {
			t.Logf("caught, as it must be: %d violations blame a loss the Unlock hid, e.g. %v", len(hid), hid[0])
		}
		if i := slices.IndexFunc(o.ghosts, func(g string) bool { return strings.Contains(g, fmt.Sprintf("%q", ghostName)) }); i < 0 {
			t.Errorf("a ghost hold passed the second invariant (the workers: %q; ghosts found: %q)", o.total.Ghost, o.ghosts)
		} else {
			t.Logf("caught, as it must be: %s", o.ghosts[i])
		}
	})
}

// chaosRun is what a chaos sub-test runs.
type chaosRun struct {
	kind     dlock.Kind
	p        workerParams
	restarts int      // percent of the faults that are a restart of Redis
	mutant   string   // a broken script the workers run (dlock.UseMutant), or ""
	mutants  []string // the workers' own chaosMutants
}

// chaosOutcome is what a chaos run found.
type chaosOutcome struct {
	total    chaosReport // the workers' reports added up, their histories joined
	overlaps []overlapViolation
	ghosts   []string
}

// mustHold fails t for every check o broke.
func (o chaosOutcome) mustHold(t *testing.T) {
	t.Helper()
	for _, v := range o.total.Unnoticed {
		t.Error(v)
	}
	for _, v := range o.overlaps {
		t.Errorf("a release that returned nil had lost its hold: %v", v)
	}
	for _, g := range o.ghosts {
		t.Errorf("ghost hold: %s", g)
	}
}

// chaosScripts are the scripts of kind the faults hit: acquire first.
func chaosScripts(kind dlock.Kind) []string {
	switch kind {
	case dlock.KindRWMutex:
		return []string{"rw_acquire", "rw_release", "extend"}
	case dlock.KindSemaphore:
		return []string{"sem_acquire", "sem_release", "extend"}
	}
	return []string{"acquire", "release", "extend"} // Mutex, FairMutex, Election
}

// chaosMatch matches the requests of op, one of chaosScripts: "release" of
// a Mutex, a FairMutex or an Election also matches its waiters' giving up
// (leave.lua), which the other kinds' release scripts do.
func chaosMatch(op string) faultproxy.Match {
	if op != "release" {
		return script(op)
	}
	release, leave := script("release"), script("leave")
	return func(c faultproxy.Command) bool { return release(c) || leave(c) }
}

// chaos runs the worker processes through the faults, restarts percent of
// them a restart of Redis, and checks what does not depend on the scripts:
// that the workers make progress, that the lock is free after the faults,
// and that Redis is left empty. It returns the workers' reports added up and
// what the invariants found in their history and in Redis after the end.
func chaos(t *testing.T, run chaosRun) chaosOutcome {
	began := time.Now()
	ctx := context.Background()
	p := run.p
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	proxy := faultproxy.Start(t, lockSrv.Addr)
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	started := time.Now() // the workers take locks until about p.For from now
	for i := range cmds {
		cmds[i] = worker(t, "chaos", run.mutant, lockSrv, resSrv, p)
		cmds[i].Env = append(cmds[i].Env, envRedis+"="+proxy.Addr(), envChaosKind+"="+string(run.kind), envChaosMutants+"="+strings.Join(run.mutants, ","))
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}

	// Faults until the workers' time is up, less 4s for them to finish
	// clean (and late acquires, below).
	ops := chaosScripts(run.kind)
	res := resSrv.Client(t)
	halfOpen := 2 // percent of the faults
	faults := map[string]int{}
	stop := time.Now().Add(p.For - 4*time.Second)
	for time.Now().Before(stop) {
		time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
		op := ops[rand.IntN(len(ops))]
		delay := time.Duration(20+rand.IntN(380)) * time.Millisecond
		if rand.IntN(100) < run.restarts {
			// Redis restarted without persistence: every lock is gone at
			// once, so another holder gets in before the old one's next
			// renewal tells it; the fence must tell them apart, and the old
			// one's Unlock must not say nil.
			if err := lockSrv.Restart(); err != nil {
				t.Fatal(err)
			}
			faults["Redis restarted empty"]++
			continue
		}
		switch f := rand.IntN(100); {
		case f < 20:
			proxy.Inject(faultproxy.Rule{Match: chaosMatch(op), Fault: faultproxy.DropReply, Times: 1})
			faults["lost reply"]++
		case f < 35:
			proxy.Inject(faultproxy.Rule{Match: chaosMatch(op), Fault: faultproxy.DropRequest, Times: 1})
			faults["lost request"]++
		case f < 50:
			proxy.Inject(faultproxy.Rule{Match: chaosMatch(op), Fault: faultproxy.DelayReply, Delay: delay, Times: 1})
			faults["late reply"]++
		case f < 62:
			proxy.Inject(faultproxy.Rule{Match: chaosMatch(op), Fault: faultproxy.DelayRequest, Delay: delay, Times: 1})
			faults["late request"]++
		case f < 72:
			proxy.Cut()
			faults["connections cut"]++
		case f < 80:
			proxy.Refuse(true)
			time.Sleep(delay / 2)
			proxy.Refuse(false)
			faults["connections refused"]++
		case f < 88:
			proxy.Pause()
			time.Sleep(delay / 2)
			proxy.Resume()
			faults["all traffic paused"]++
		case f < 100-halfOpen:
			// The process of the holder (or the last one) stopped past its
			// TTL, as in a GC pause or a frozen VM: others take the lock
			// meanwhile; its late write must be rejected by the fence and its
			// lease reported lost.
			pid, _ := res.Get(ctx, "holder").Int()
			for _, cmd := range cmds {
				if cmd.Process.Pid == pid {
					_ = cmd.Process.Signal(syscall.SIGSTOP)
					time.Sleep(p.TTL + delay)
					_ = cmd.Process.Signal(syscall.SIGCONT)
					faults["holder stopped past its TTL"]++
				}
			}
		default:
			proxy.BlackholePubSub()
			faults["pub/sub half-open"]++
		}
	}
	proxy.Clear()

	// The longest TTL a lease of the run may have: Extend sets up to twice
	// the TTL (a Leadership has none).
	ttlMax := p.TTL
	if p.Extend && run.kind != dlock.KindElection {
		ttlMax = 2 * p.TTL
	}
	// Late acquires: from 3s to 2s before the workers stop, up to three
	// acquires, one after another, are each held back for lateBy, longer
	// than their Lock waits (its context ends after 2s, when it gives up
	// and undoes what it may have taken), so that they land when the
	// workers have stopped taking locks. Then the owner has given up: the
	// acquire must take nothing (DECISIONS §4), or it holds the lock for a
	// whole TTL with nobody holding it, a ghost hold. A worker's Close waits
	// for a request in flight, so it lands before the end: it is checked as
	// it lands, by its owner id.
	lates := make(chan lateAcquire, 3)
	gone := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		watchLateAcquires(proxy, lockSrv, ops[0], p.TTL, started.Add(p.For-3*time.Second), started.Add(p.For-2*time.Second), gone, lates)
	})

	var total chaosReport
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		var rep chaosReport
		if err := json.Unmarshal([]byte(outs[i].String()), &rep); err != nil {
			t.Fatalf("worker %d report %q: %v", i, outs[i].String(), err)
		}
		total.Sections += rep.Sections
		total.Accepted += rep.Accepted
		total.Stale += rep.Stale
		total.Noticed += rep.Noticed
		total.Stopped += rep.Stopped
		total.LostInside += rep.LostInside
		total.Extends += rep.Extends
		total.Unnoticed = append(total.Unnoticed, rep.Unnoticed...)
		total.History = append(total.History, rep.History...)
		if rep.Ghost != "" {
			total.Ghost = strings.TrimPrefix(total.Ghost+"; ", "; ") + rep.Ghost
		}
		t.Logf("worker %d (pid %d): lock errors %v, extend errors %v, unlock errors %v %s", i, rep.Pid, rep.LockErrors, rep.ExtendErrs, rep.UnlockErrs, rep.FirstOther)
	}
	// The end: every worker's Client has closed (the process has exited),
	// so no owner holds anything, nothing is renewed any more, and every
	// hold a legitimate request took or renewed lapses within ttlMax.
	end := time.Now()
	close(gone)
	watcher.Wait()
	close(lates)
	// Every request the proxy held back has reached Redis by then, bar
	// those of a late acquire whose Close did not wait.
	lastLate := end
	var lateOnes []lateAcquire
	for l := range lates {
		faults["acquire held back past its Lock"]++
		lastLate = later(lastLate, l.landed)
		if l.err != nil {
			t.Fatal(l.err)
		}
		lateOnes = append(lateOnes, l)
		t.Logf("late acquire: %s", l)
	}
	nfaults := 0
	for _, n := range faults {
		nfaults += n
	}
	t.Logf("faults injected: %v", faults)
	holds := map[string]int{}
	for _, s := range total.History {
		holds[s.Hold]++
	}
	t.Logf("%d critical sections %v, %d Extends, %d fenced writes accepted, %d stale (%d noticed as lost, %d of them by a process stopped meanwhile), %d leases lost inside",
		total.Sections, holds, total.Extends, total.Accepted, total.Stale, total.Noticed, total.Stopped, total.LostInside)
	if total.Sections < int64(p.For/time.Second) {
		t.Errorf("only %d critical sections in %v", total.Sections, p.For)
	}

	// The first invariant, from the history.
	overlaps := checkOverlaps(total.History)
	var ghosts []string
	for _, l := range lateOnes {
		if g := l.ghostOf(total.History); g != "" {
			ghosts = append(ghosts, g)
		}
	}

	// The second: one TTL after the end, and once the requests held back
	// have arrived, Redis holds nothing. First show that the check would
	// see a hold, then look.
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL))
	for _, h := range heldInRedis(t, c) {
		t.Logf("held or waited for when the last worker had exited (it may be released yet): %s", h)
	}
	probeHeldLocks(t, c, run.kind, p)
	settle := p.TTL / 2 // Redis's expiry, and the grant lease of a release that came late
	checkAt := later(end.Add(ttlMax+settle), lastLate.Add(settle))
	t.Logf("the end came %v after the faults stopped; the last acquire held back reached Redis %v after the end; Redis is checked for ghost holds %v after the end",
		end.Sub(stop).Round(time.Millisecond), lastLate.Sub(end).Round(time.Millisecond), checkAt.Sub(end).Round(time.Millisecond))
	time.Sleep(time.Until(checkAt))
	for _, h := range heldInRedis(t, c) {
		if len(h.Holders) == 0 {
			continue
		}
		ghosts = append(ghosts, fmt.Sprintf("%s, at the end + %v", h.describe(end), time.Since(end).Round(time.Millisecond)))
	}

	// The faults are over: a Client takes the lock whole at once, and Redis
	// is left with nothing once the TTL has run out.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lk, err := chaosLockOf(c, run.kind, p.Name, p)
	if err != nil {
		t.Fatal(err)
	}
	h, err := lk.take(lctx, true)
	if err != nil {
		t.Fatalf("%s after the faults: %v", run.kind, err)
	}
	if err := h.release(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := lockSrv.Client(t)
	if !within(15*time.Second, func() bool { return len(allKeys(t, rdb)) == 0 }) {
		t.Errorf("keys left after the chaos: %q", allKeys(t, rdb))
	}
	byHold := overlapsByHold(overlaps)
	for _, k := range slices.Sorted(maps.Keys(byHold)) {
		i := slices.IndexFunc(overlaps, func(v overlapViolation) bool { return v.Later.Hold == k })
		t.Logf("first invariant, %d violations where a %s hold was granted, e.g. %v", byHold[k], k, overlaps[i])
	}
	t.Logf("figures: %s: %d sections %v, %d restarts of Redis, %d faults in all; first invariant: %d violations %v; second invariant: %d ghost holds; %v",
		run.kind, len(total.History), holds, faults["Redis restarted empty"], nfaults, len(overlaps), byHold, len(ghosts), time.Since(began).Round(time.Second))
	return chaosOutcome{total: total, overlaps: overlaps, ghosts: ghosts}
}

// heldLock is a lock Redis held, as Inspect read it.
type heldLock struct{ *dlock.LockState }

func (h heldLock) String() string { return h.describe(time.Time{}) }

// describe tells each holder of h: owner, Client, fence and TTL left, and
// when it was granted relative to end, if end is not zero.
func (h heldLock) describe(end time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q held by", h.Kind, h.Name)
	for i, o := range h.Holders {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (Client %q", o.Owner, o.ClientName)
		if o.Read {
			b.WriteString(", a read hold")
		}
		if o.Permits > 0 {
			fmt.Fprintf(&b, ", %d permits", o.Permits)
		}
		fmt.Fprintf(&b, ") with fence %d and %v of its TTL left", o.Fence, o.TTL)
		if d := o.Since.Sub(end).Round(time.Millisecond); !end.IsZero() && !o.Since.IsZero() && d >= 0 {
			fmt.Fprintf(&b, ", granted %v after the end", d)
		} else if !end.IsZero() && !o.Since.IsZero() {
			fmt.Fprintf(&b, ", granted %v before the end", -d)
		}
	}
	if len(h.Holders) == 0 {
		b.WriteString(" nobody")
	}
	if len(h.Waiters) > 0 {
		fmt.Fprintf(&b, ", with %d waiters (%d queued)", len(h.Waiters), h.Queued)
	}
	return b.String()
}

// heldInRedis returns every lock with a holder or a waiter in c's Redis,
// read with Locks and Inspect, as the dlock command's ls and inspect read
// them.
func heldInRedis(t *testing.T, c *dlock.Client) []heldLock {
	t.Helper()
	held, err := readHeld(c)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// readHeld is heldInRedis off the test's goroutine.
func readHeld(c *dlock.Client) ([]heldLock, error) {
	ctx := context.Background()
	var held []heldLock
	for id, err := range c.Locks(ctx, "*") {
		if err != nil {
			return nil, fmt.Errorf("Locks: %w", err)
		}
		st, err := c.Inspect(ctx, id.Kind, id.Name)
		if err != nil {
			return nil, fmt.Errorf("Inspect %s %q: %w", id.Kind, id.Name, err)
		}
		if len(st.Holders) > 0 || len(st.Waiters) > 0 {
			held = append(held, heldLock{st})
		}
	}
	return held, nil
}

// lateAcquire is an acquire the proxy held back until after its Lock gave
// up, and what Redis held for its owner when it had landed.
type lateAcquire struct {
	owner          string
	held, landed   time.Time // when the proxy took it, and when it reached Redis
	ghost, waiting string    // the hold it took, the registration it left, if any
	kind           dlock.Kind
	name           string // of the lock it took
	fence          int64  // of the hold it took
	err            error
}

// ghostOf returns the ghost hold l took, if it took one that is none of the
// history's sections: a Lock that returned with the hold after all (its
// process was not run until the reply had come) held it rightly.
func (l lateAcquire) ghostOf(history []section) string {
	if l.ghost == "" || slices.ContainsFunc(history, func(s section) bool { return s.Kind == l.kind && s.Name == l.name && s.Fence == l.fence }) {
		return ""
	}
	return fmt.Sprintf("a late acquire took a hold: %s", l)
}

func (l lateAcquire) String() string {
	s := fmt.Sprintf("an acquire of owner %s held back at %s reached Redis at %s", l.owner, l.held.Format("15:04:05.000"), l.landed.Format("15:04:05.000"))
	switch {
	case l.ghost != "":
		return s + " and took a hold: " + l.ghost
	case l.waiting != "":
		return s + " and took nothing; it queued a waiter: " + l.waiting
	}
	return s + " and took nothing"
}

// lateBy is how long an acquire is held back: its Lock's context ends after
// 2s (chaosWorker), when it gives up.
const lateBy = 4 * time.Second

// ownerArg matches an owner id: a Client's id (16 hex digits), ':', a
// number.
var ownerArg = regexp.MustCompile(`^[0-9a-f]{16}:[0-9]+$`)

// watchLateAcquires holds back a request of the script op for lateBy, up to
// three in all, one at a time, 400ms apart, from from until until (or until
// gone is closed), and sends on lates what Redis holds of each one's owner
// ttl/4 after it landed: nothing, as its Lock had given up.
func watchLateAcquires(proxy *faultproxy.Proxy, lockSrv *redistest.Server, op string, ttl time.Duration, from, until time.Time, gone <-chan struct{}, lates chan<- lateAcquire) {
	select {
	case <-time.After(time.Until(from)):
	case <-gone:
		return
	}
	rdb := redis.NewClient(lockSrv.Options())
	defer rdb.Close()
	c, err := dlock.New(rdb)
	if err != nil {
		lates <- lateAcquire{err: err}
		return
	}
	defer c.Close()
	var checks sync.WaitGroup
	defer checks.Wait()
	isOp := script(op)
	for range cap(lates) {
		var mu sync.Mutex
		var owner string
		in := proxy.Inject(faultproxy.Rule{Fault: faultproxy.DelayRequest, Delay: lateBy, Times: 1, Match: func(cmd faultproxy.Command) bool {
			if !isOp(cmd) {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			if owner != "" {
				return false
			}
			for i := range len(cmd) {
				if a := string(cmd.Arg(i)); ownerArg.MatchString(a) {
					owner = a
					return true
				}
			}
			return false
		}})
		select {
		case <-in.Hit():
		case <-time.After(time.Until(until)):
			in.Remove()
			return
		case <-gone:
			in.Remove()
			return
		}
		mu.Lock()
		l := lateAcquire{owner: owner, held: time.Now()}
		mu.Unlock()
		l.landed = l.held.Add(lateBy)
		checks.Go(func() {
			time.Sleep(time.Until(l.landed.Add(ttl / 4)))
			held, err := readHeld(c)
			for _, h := range held {
				for _, o := range h.Holders {
					if o.Owner == l.owner {
						l.ghost, l.kind, l.name, l.fence = h.String(), h.Kind, h.Name, o.Fence
					}
				}
				for _, w := range h.Waiters {
					if w.Owner == l.owner {
						l.waiting = fmt.Sprintf("%s %q, %v of its registration left", h.Kind, h.Name, w.TTL)
					}
				}
			}
			l.err = err
			lates <- l
		})
		time.Sleep(400 * time.Millisecond)
	}
}

// probeHeldLocks shows that heldInRedis sees a hold of kind, whole and (of an
// RWMutex) a read hold, and no longer sees it once released: the second
// invariant's check cannot pass for want of seeing.
func probeHeldLocks(t *testing.T, c *dlock.Client, kind dlock.Kind, p workerParams) {
	t.Helper()
	ctx := context.Background()
	const name = "chaos-probe"
	lk, err := chaosLockOf(c, kind, name, p)
	if err != nil {
		t.Fatal(err)
	}
	seen := func(h *chaosHold) bool {
		return slices.ContainsFunc(heldInRedis(t, c), func(l heldLock) bool {
			return l.Kind == kind && l.Name == name && slices.ContainsFunc(l.Holders, func(o dlock.Holder) bool { return o.Fence == h.fence })
		})
	}
	probe := func(h *chaosHold, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		if !seen(h) {
			t.Fatalf("the check for ghost holds does not see a %s hold of %s %q with fence %d", h.hold, kind, name, h.fence)
		}
		if err := h.release(ctx); err != nil {
			t.Fatalf("probe: %v", err)
		}
		if seen(h) {
			t.Fatalf("the check for ghost holds still sees a released %s hold of %s %q with fence %d", h.hold, kind, name, h.fence)
		}
	}
	probe(lk.take(ctx, true))
	if kind == dlock.KindRWMutex {
		l, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatalf("probe: %v", err)
		}
		probe(leaseHold(holdRead, 0, l), nil)
	}
}
