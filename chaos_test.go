//go:build chaos

package dlock_test

// The chaos run: make chaos, or go test -race -tags chaos -run Chaos -v .
// DLOCK_CHAOS_FOR sets how long the faults go on (default 60s).

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestChaos: worker processes take one lock over and over through a fault
// proxy that keeps losing, delaying and holding back requests and replies,
// cutting and refusing connections, pausing all traffic and making pub/sub
// connections half-open, while Redis restarts empty now and then and the
// holder's process is stopped past its TTL. The fenced resource must never see a holder that
// did not learn within a renewal period that it had lost the lock; after the
// faults stop, every worker gets the lock again, and Redis is left empty
// once the TTLs and markers have run out.
func TestChaos(t *testing.T) {
	d := 60 * time.Second
	if v := os.Getenv("DLOCK_CHAOS_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, fair := range []bool{false, true} {
		t.Run(map[bool]string{false: "Mutex", true: "FairMutex"}[fair], func(t *testing.T) {
			total := chaos(t, "", workerParams{Name: "chaos", TTL: time.Second, Goroutines: 4, Fair: fair, For: d, Extend: true}, 8)
			for _, v := range total.Unnoticed {
				t.Error(v)
			}
		})
	}
	// 32 goroutines a process over 8 locks: the Client batches their
	// acquires and releases into pipelines, and renews many leases in one
	// call, so that the faults hit requests that share a pipeline.
	t.Run("batched", func(t *testing.T) {
		total := chaos(t, "", workerParams{Name: "chaos", TTL: time.Second, Goroutines: 32, Names: 8, For: d, Extend: true}, 8)
		for _, v := range total.Unnoticed {
			t.Error(v)
		}
	})
	// The same checks catch a renewal that extends whatever holds the lock:
	// after Redis restarted empty, the holder goes on believing it holds the
	// lock that another has taken. Restarts are made frequent here.
	t.Run("broken-renewal-is-caught", func(t *testing.T) {
		total := chaos(t, "extend-ignores-owner", workerParams{Name: "chaos", TTL: time.Second, Goroutines: 4, For: min(d, 20*time.Second)}, 40)
		if len(total.Unnoticed) == 0 {
			t.Fatal("a renewal that ignores the owner passed the checks")
		}
		t.Logf("caught, as it must be: %d stale writes by holders that never learned", len(total.Unnoticed))
	})
}

// chaos runs the worker processes (with the named broken script, if not "")
// through the faults, restarts percent of them a restart of Redis, and checks
// what does not depend on the script: that they make progress, that the lock
// is free after the faults, and that Redis is left empty. It returns the
// workers' reports added up.
func chaos(t *testing.T, mutant string, p workerParams, restarts int) chaosReport {
	ctx := context.Background()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	proxy := faultproxy.Start(t, lockSrv.Addr)
	const procs = 4
	cmds := make([]*exec.Cmd, procs)
	outs := make([]strings.Builder, procs)
	for i := range cmds {
		cmds[i] = worker(t, "chaos", mutant, lockSrv, resSrv, p)
		cmds[i].Env = append(cmds[i].Env, envRedis+"="+proxy.Addr())
		cmds[i].Stdout = &outs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}

	// Faults until the workers' time is up, less 3s for them to finish
	// clean.
	ops := []string{"acquire", "release", "extend"}
	res := resSrv.Client(t)
	halfOpen := 2 // percent of the faults
	faults := map[string]int{}
	stop := time.Now().Add(p.For - 3*time.Second)
	for time.Now().Before(stop) {
		time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
		op := ops[rand.IntN(len(ops))]
		delay := time.Duration(20+rand.IntN(380)) * time.Millisecond
		if rand.IntN(100) < restarts {
			// Redis restarted without persistence: every lock is gone at
			// once, so another holder gets in before the old one's next
			// renewal tells it; the fence must tell them apart.
			if err := lockSrv.Restart(); err != nil {
				t.Fatal(err)
			}
			faults["Redis restarted empty"]++
			continue
		}
		switch f := rand.IntN(100); {
		case f < 20:
			proxy.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DropReply, Times: 1})
			faults["lost reply"]++
		case f < 35:
			proxy.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DropRequest, Times: 1})
			faults["lost request"]++
		case f < 50:
			proxy.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DelayReply, Delay: delay, Times: 1})
			faults["late reply"]++
		case f < 62:
			proxy.Inject(faultproxy.Rule{Match: script(op), Fault: faultproxy.DelayRequest, Delay: delay, Times: 1})
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
	t.Logf("faults injected: %v", faults)

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
		t.Logf("worker %d: lock errors %v, extend errors %v, unlock errors %v %s", i, rep.LockErrors, rep.ExtendErrs, rep.UnlockErrs, rep.FirstOther)
	}
	t.Logf("%d critical sections, %d Extends, %d fenced writes accepted, %d stale (%d noticed as lost, %d of them by a process stopped meanwhile), %d leases lost inside",
		total.Sections, total.Extends, total.Accepted, total.Stale, total.Noticed, total.Stopped, total.LostInside)
	if total.Sections < int64(p.For/time.Second) {
		t.Errorf("only %d critical sections in %v", total.Sections, p.For)
	}

	// The faults are over: a Client gets the lock at once, and Redis is
	// left with nothing once the TTL has run out.
	c := clientOn(t, lockSrv.Client(t), dlock.WithTTL(p.TTL))
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := p.lock(c).Lock(lctx)
	if err != nil {
		t.Fatalf("Lock after the faults: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	rdb := lockSrv.Client(t)
	if !within(15*time.Second, func() bool { return len(allKeys(t, rdb)) == 0 }) {
		t.Errorf("keys left after the chaos: %q", allKeys(t, rdb))
	}
	return total
}
