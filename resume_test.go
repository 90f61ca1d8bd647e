package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// resumeReport is what a resumed holder saw: how many times a lease whose
// local deadline had passed still answered that it was held, and whether
// the process was stopped while it held the lease.
type resumeReport struct {
	Asked      int64 // times the lease was asked after its deadline
	Err        int64 // Lease.Err was nil
	ContextErr int64 // the Context's Err was nil
	FreshErr   int64 // a Context made then had a nil Err
	StoppedAt  bool  // the loop stood still for half a TTL or more, from before the deadline
	Loss       string
}

// resumeWorker takes p's lock (not renewed), says so, then asks, over and over and as fast
// as it can, whether the lease still holds (Err, its Context's Err, a fresh
// Context's Err), counting the answers that say yes after the lease's local
// deadline must have passed, until they say it ended after that deadline.
// The test stops it with SIGSTOP past its TTL in between: when it resumes,
// the loop runs before any timer of the process fires, or after.
func resumeWorker(c *dlock.Client, p workerParams) error {
	ctx := context.Background()
	// Not renewed: its local deadline is at most TTL after the Lock
	// returned, whenever the SIGSTOP comes.
	l, err := c.Mutex(p.Name, dlock.WithoutRenewal()).Lock(ctx)
	if err != nil {
		return err
	}
	limit := time.Now().Add(p.TTL)
	lctx, cancel := l.Context(ctx)
	defer cancel()
	var rep resumeReport
	prev := time.Now() // (before it says so: the stop may come at once)
	fmt.Println("held")
	for {
		// The time first: each answer is given after it.
		now := time.Now()
		if now.Sub(prev) >= p.TTL/2 && prev.Before(limit) {
			rep.StoppedAt = true
		}
		prev = now
		late := now.After(limit)
		lerr, cerr := l.Err(), lctx.Err()
		if late {
			rep.Asked++
			if lerr == nil {
				rep.Err++
			}
			if cerr == nil {
				rep.ContextErr++
			}
			fctx, fcancel := l.Context(ctx)
			if fctx.Err() == nil {
				rep.FreshErr++
			}
			fcancel()
			if lerr != nil && cerr != nil {
				rep.Loss = lerr.Error()
				break
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// TestResumedHolderAsks: a holder process stopped (SIGSTOP) past its TTL
// and continued asks whether it holds its lease before any timer of its
// process has fired: Err, its Context's Err and a fresh Context all say
// the lease ended, every time, compared with the local deadline when asked.
func TestResumedHolderAsks(t *testing.T) {
	// Not in parallel: it stops a process for twice its TTL. An attempt in
	// which the stop came only after the lease's deadline (a loaded
	// machine) shows nothing, and is made again.
	const attempts = 3
	for i := range attempts {
		p := workerParams{Name: fmt.Sprintf("resumed-%d", i), TTL: 2 * time.Second}
		rep := resumeOnce(t, p)
		if !rep.StoppedAt {
			t.Logf("attempt %d: the worker was stopped only after its lease's deadline", i+1)
			continue
		}
		if rep.Err+rep.ContextErr+rep.FreshErr > 0 {
			t.Errorf("after its deadline, asked %d times, the lease said it held: Err %d times, its Context %d, a fresh Context %d", rep.Asked, rep.Err, rep.ContextErr, rep.FreshErr)
		}
		t.Logf("asked %d times after the deadline; ended with %s", rep.Asked, rep.Loss)
		return
	}
	t.Fatalf("in %d attempts, the worker was never stopped while it held its lease", attempts)
}

// resumeOnce runs a resume worker, stops it for twice its TTL once it holds
// the lock, continues it, and returns its report.
func resumeOnce(t *testing.T, p workerParams) resumeReport {
	t.Helper()
	lockSrv, resSrv := redistest.Start(t), redistest.Start(t)
	cmd := worker(t, "resume", "", lockSrv, resSrv, p)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if line, err := r.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("worker said %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * p.TTL)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var rep resumeReport
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		t.Fatalf("worker report: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("worker: %v", err)
	}
	return rep
}
