package dlocktest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/redis/go-redis/v9"
)

// exampleT stands in, in these examples, for the *testing.T of a test: in
// your own tests pass t. Fatal stops the example, printing why (so that an
// example that cannot start its server fails, showing what to install), and
// the cleanups run when the example returns.
type exampleT struct {
	testing.TB // for its unexported method only; what dlocktest calls is below
	cleanups   []func()
}

type exampleStop string

func (t *exampleT) Helper()                         {}
func (t *exampleT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Logf(format string, args ...any) {}
func (t *exampleT) Fatal(args ...any)               { panic(exampleStop(fmt.Sprint(args...))) }
func (t *exampleT) Fatalf(format string, args ...any) {
	panic(exampleStop(fmt.Sprintf(format, args...)))
}

// An example cannot skip: TestMain skips the whole package instead.
func (t *exampleT) Skipf(format string, args ...any) { t.Fatalf(format, args...) }

// end runs the cleanups, last first, and prints why the example stopped, if
// it did. Defer it.
func (t *exampleT) end() {
	r := recover()
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	if stop, ok := r.(exampleStop); ok {
		fmt.Println(stop)
	} else if r != nil {
		panic(r)
	}
}

func ExampleNewServer() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	lease, err := srv.Client.Mutex("report").TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = srv.Client.Mutex("report").TryLock(ctx)
	fmt.Println("a second TryLock:", errors.Is(err, dlock.ErrNotAcquired))
	fmt.Println("Unlock:", lease.Unlock(ctx))
	// Output:
	// a second TryLock: true
	// Unlock: <nil>
}

func ExampleLose() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	var stopped error
	err := srv.Client.Mutex("nightly-report").Do(ctx, func(ctx context.Context) error {
		lease, _ := dlock.LeaseFromContext(ctx)
		dlocktest.Lose(t, lease) // as if the lease had run out right now
		<-ctx.Done()             // closed already: Lose returns after the loss
		stopped = context.Cause(ctx)
		return nil
	})
	fmt.Println("the job's context:", stopped)
	fmt.Println("lost:", errors.Is(stopped, dlock.ErrLockLost))
	fmt.Println("Do:", errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// the job's context: dlock: lock lost: "nightly-report" expired
	// lost: true
	// Do: true
}

func ExampleSteal() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	lease, err := srv.Client.Mutex("invoice:42").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dlocktest.Steal(t, lease)
	fmt.Println(lease.Err())

	st, err := srv.Client.Inspect(ctx, dlock.KindMutex, "invoice:42")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("held by:", st.Holders[0].Client)
	fmt.Println("with a higher fence:", st.Holders[0].Fence > lease.Fence())
	// Output:
	// dlock: lock lost: "invoice:42" is held by another owner
	// held by: dlocktest.Steal
	// with a higher fence: true
}

// A Client whose connection to Redis is cut loses its lease at the lease's
// local deadline, a little before its TTL runs out.
func ExampleNewFaults() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	faults := dlocktest.NewFaults(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: faults.Addr})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer faults.Restore() // so that Close can release what is left

	ctx := context.Background()
	lease, err := c.Mutex("sync").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	faults.Cut()
	<-lease.Done()
	fmt.Println("lost:", errors.Is(lease.Err(), dlock.ErrLockLost))
	// Output:
	// lost: true
}

func ExampleFaults_Cut() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	faults := dlocktest.NewFaults(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: faults.Addr})
	defer rdb.Close()
	ctx := context.Background()

	faults.Cut()
	fmt.Println("cut:", rdb.Ping(ctx).Err())
	faults.Restore()
	fmt.Println("restored:", rdb.Ping(ctx).Val())
	// Output:
	// cut: EOF
	// restored: PONG
}

func ExampleFaults_Pause() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	faults := dlocktest.NewFaults(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: faults.Addr, ReadTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	ctx := context.Background()

	faults.Pause()
	err := rdb.Ping(ctx).Err()
	var ne net.Error
	fmt.Println("paused, a timeout:", errors.As(err, &ne) && ne.Timeout())
	faults.Restore()
	fmt.Println("restored:", rdb.Ping(ctx).Val())
	// Output:
	// paused, a timeout: true
	// restored: PONG
}

// A Lock whose reply is lost runs twice in Redis, and returns one hold with
// the fence Redis keeps.
func ExampleFaults_LoseNextReply() {
	t := new(exampleT) // your test's t
	defer t.end()

	srv := dlocktest.NewServer(t)
	faults := dlocktest.NewFaults(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: faults.Addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // a connection, past its handshake
		t.Fatal(err)
	}

	lost := faults.LoseNextReply()
	n, err := rdb.Incr(ctx, "visits").Result()
	<-lost
	fmt.Println("INCR:", n, err) // go-redis sent it again: it ran twice

	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	warm, err := c.Mutex("warm-up").Lock(ctx) // the Client's first requests
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lost = faults.LoseNextReply()
	lease, err := c.Mutex("visits").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-lost
	st, err := srv.Client.Inspect(ctx, dlock.KindMutex, "visits")
	if err != nil {
		t.Fatal(err)
	}
	h := st.Holders[0]
	fmt.Println("holds:", h.Holds, "same fence:", h.Fence == lease.Fence())
	fmt.Println("Unlock:", lease.Unlock(ctx))
	// Output:
	// INCR: 2 <nil>
	// holds: 1 same fence: true
	// Unlock: <nil>
}
