package dlock_test

import (
	"context"
	"fmt"
	"iter"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestNilReceivers: every exported method of every type, called on a nil
// receiver and on a zero value, returns an error (or, for methods that return
// none, a zero value or a closed channel) and never panics or blocks.
func TestNilReceivers(t *testing.T) {
	t.Parallel()
	receivers := []any{
		(*dlock.Client)(nil), &dlock.Client{},
		(*dlock.Mutex)(nil), &dlock.Mutex{},
		(*dlock.FairMutex)(nil), &dlock.FairMutex{},
		(*dlock.RWMutex)(nil), &dlock.RWMutex{},
		(*dlock.Semaphore)(nil), &dlock.Semaphore{},
		(*dlock.CountDownLatch)(nil), &dlock.CountDownLatch{},
		(*dlock.MultiLock)(nil), &dlock.MultiLock{},
		(*dlock.Lease)(nil), &dlock.Lease{},
		(*dlock.MultiLease)(nil), &dlock.MultiLease{},
	}
	for _, r := range receivers {
		v := reflect.ValueOf(r)
		for i := range v.NumMethod() {
			name := v.Type().String() + "." + v.Type().Method(i).Name
			if !v.IsNil() && v.Elem().IsZero() {
				name = "zero " + name
			}
			m := v.Method(i)
			out := callMethod(t, name, m, args(m.Type(), false))
			checkRefused(t, name, out)
			for _, o := range out {
				if c, ok := o.Interface().(context.Context); ok && c.Err() == nil {
					t.Errorf("%s returned a live context", name)
				}
			}
		}
	}
}

// TestNilContext: every exported method that takes a context, of every type
// made from a working Client (a held Lease and MultiLease too), given a nil
// context, returns an error and sends nothing to Redis; none panics. Lease
// and MultiLease's Context, whose nil parent is documented as
// context.Background, are the exceptions.
func TestNilContext(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	sent := countRequests(rdb)
	c := clientOn(t, rdb, dlock.WithTTL(time.Minute)) // no renewal during the test
	ctx := context.Background()
	held, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)
	multi, err := c.MultiLock([]string{"m1", "m2"}).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer multi.Unlock(ctx)
	sent.take()
	for _, r := range []any{
		c, c.Mutex("x"), c.FairMutex("x"), c.RWMutex("x"), c.Semaphore("x", 1),
		c.CountDownLatch("x"), c.MultiLock([]string{"x", "y"}), held, multi,
	} {
		v := reflect.ValueOf(r)
		for i := range v.NumMethod() {
			m, name := v.Method(i), v.Type().String()+"."+v.Type().Method(i).Name
			a := args(m.Type(), true)
			if !takesContext(a) || name == "*dlock.Lease.Context" || name == "*dlock.MultiLease.Context" {
				continue
			}
			checkRefused(t, name+"(nil context)", callMethod(t, name, m, a))
			if n := sent.take(); n != 0 {
				t.Errorf("%s(nil context) sent %d requests to Redis", name, n)
			}
		}
	}
}

// takesContext reports whether a holds a nil context: the method takes one.
func takesContext(a []reflect.Value) bool {
	for _, v := range a {
		if v.Type() == reflect.TypeFor[context.Context]() && v.IsNil() {
			return true
		}
	}
	return false
}

// TestBadInput: every exported constructor, option and method given bad
// input (nil, a nil pointer, a zero go-redis client, an empty name, one
// longer than MaxNameLen, a number below what is due, a nil function)
// returns an error that says what is wrong, without quoting a huge name; none
// panics, and none sends a request to Redis, so nothing is written.
// (TestNilReceivers and TestNilContext cover nil receivers and contexts.)
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	sent := countRequests(rdb)
	c := clientOn(t, rdb, dlock.WithTTL(time.Minute)) // no renewal during the test
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	long := strings.Repeat("n", dlock.MaxNameLen+1)
	huge := strings.Repeat("n", 64<<20) // once accepted: Redis held about 160 MB
	// Nodes for NewRedLock, which does not contact Redis.
	node := func(port int) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	nodes := func(n redis.UniversalClient, at int) []redis.UniversalClient {
		ns := []redis.UniversalClient{node(1), node(2), node(3)}
		ns[at] = n
		return ns
	}
	badAP := redis.NewClient(&redis.Options{Addr: srv.Addr, AutoPipelineOptions: &redis.AutoPipelineOptions{MaxConcurrentBatches: 2}})
	t.Cleanup(func() { badAP.Close() })

	held, err := c.Mutex("held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	multi, err := c.MultiLock([]string{"m1", "m2"}).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keys := len(allKeys(t, rdb)) // but the Client's record, written in the background
	sent.take()

	type row struct {
		name, want string
		call       func() error
	}
	rows := []row{
		{"New(nil)", "nil", func() error { return errOf(dlock.New(nil)) }},
		{"New(nil *redis.Client)", "nil *redis.Client", func() error { return errOf(dlock.New((*redis.Client)(nil))) }},
		{"New(nil *redis.ClusterClient)", "nil *redis.ClusterClient", func() error { return errOf(dlock.New((*redis.ClusterClient)(nil))) }},
		{"New(nil *redis.Ring)", "nil *redis.Ring", func() error { return errOf(dlock.New((*redis.Ring)(nil))) }},
		{"New(zero redis.Client)", "zero *redis.Client", func() error { return errOf(dlock.New(&redis.Client{})) }},
		{"New(zero redis.ClusterClient)", "zero *redis.ClusterClient", func() error { return errOf(dlock.New(&redis.ClusterClient{})) }},
		{"New with an invalid autopipeliner", "WithAutoPipeline", func() error { return errOf(dlock.New(badAP, dlock.WithAutoPipeline())) }},
		{"NewRedLock(nil)", "0 nodes", func() error { return errOf(dlock.NewRedLock(nil)) }},
		{"NewRedLock, a nil node", "node 1 is nil", func() error { return errOf(dlock.NewRedLock(nodes(nil, 1))) }},
		{"NewRedLock, a nil *redis.Client node", "node 1 is a nil *redis.Client", func() error { return errOf(dlock.NewRedLock(nodes((*redis.Client)(nil), 1))) }},
		{"NewRedLock, a zero redis.Client node", "node 2 is a zero *redis.Client", func() error { return errOf(dlock.NewRedLock(nodes(&redis.Client{}, 2))) }},

		{"WithTTL(0)", "at least", func() error { return errOf(dlock.New(rdb, dlock.WithTTL(0))) }},
		{"WithTTL(negative)", "at least", func() error { return errOf(dlock.New(rdb, dlock.WithTTL(-time.Second))) }},
		{"WithTTL(below MinTTL)", "at least", func() error { return errOf(dlock.New(rdb, dlock.WithTTL(dlock.MinTTL-time.Millisecond))) }},
		{"WithPrefix with a brace", "'{'", func() error { return errOf(dlock.New(rdb, dlock.WithPrefix("a{b"))) }},
		{"WithPrefix(too long)", "MaxNameLen", func() error { return errOf(dlock.New(rdb, dlock.WithPrefix(long))) }},
		{"WithPrefix(64 MiB)", "MaxNameLen", func() error { return errOf(dlock.New(rdb, dlock.WithPrefix(huge))) }},
		{"WithLogger(nil)", "WithLogger(nil)", func() error { return errOf(dlock.New(rdb, dlock.WithLogger(nil))) }},
		{"WithWaitReplicas(negative)", "negative", func() error { return errOf(dlock.New(rdb, dlock.WithWaitReplicas(-1, time.Second))) }},
		{"WithWaitReplicas(n, 0)", "positive", func() error { return errOf(dlock.New(rdb, dlock.WithWaitReplicas(1, 0))) }},
		{"WithNodeTimeout(negative)", "positive", func() error { return errOf(dlock.NewRedLock(nodes(node(4), 0), dlock.WithNodeTimeout(-time.Second))) }},
		{"WithNodeTimeout on New", "NewRedLock only", func() error { return errOf(dlock.New(rdb, dlock.WithNodeTimeout(time.Second))) }},
		{"zero Option", "zero Option", func() error { return errOf(dlock.New(rdb, dlock.Option{})) }},
		{"a Client's option to a Mutex", "applies to a Client only", func() error { return errOf(c.Mutex("x", dlock.WithPrefix("p:")).Lock(ctx)) }},
		{"WithAutoPipeline to a Mutex", "applies to a Client only", func() error { return errOf(c.Mutex("x", dlock.WithAutoPipeline()).TryLock(ctx)) }},
		{"WithTTL(negative) to a Mutex", "at least", func() error { return errOf(c.Mutex("x", dlock.WithTTL(-time.Second)).Lock(ctx)) }},

		{"MultiLock(nil)", "no lock names", func() error { return errOf(c.MultiLock(nil).Lock(ctx)) }},
		{"MultiLock of no names", "no lock names", func() error { return errOf(c.MultiLock([]string{}).TryLock(ctx)) }},
		{"Inspect of an unknown kind", "unknown kind", func() error { return errOf(c.Inspect(ctx, "Lock", "x")) }},
		{"Locks(too long a pattern)", "MaxNameLen", func() error { return firstErr(c.Locks(ctx, long)) }},
		{"ForceRelease of a CountDownLatch", "no holders", func() error { return errOf(c.ForceRelease(ctx, dlock.KindCountDownLatch, "x")) }},

		{"Semaphore(0 permits)", "want at least 1", func() error { return errOf(c.Semaphore("s", 0).Acquire(ctx, 1)) }},
		{"Semaphore(negative permits)", "want at least 1", func() error { return errOf(c.Semaphore("s", -1).TryAcquire(ctx, 1)) }},
		{"Semaphore.Acquire(0)", "want at least 1", func() error { return errOf(c.Semaphore("s", 1).Acquire(ctx, 0)) }},
		{"Semaphore.TryAcquire(negative)", "want at least 1", func() error { return errOf(c.Semaphore("s", 1).TryAcquire(ctx, -1)) }},
		{"Semaphore.SetPermits(negative)", "want at least 1", func() error { return c.Semaphore("s", 1).SetPermits(ctx, -1) }},
		{"CountDownLatch.TrySetCount(0)", "want more than 0", func() error { return errOf(c.CountDownLatch("l").TrySetCount(ctx, 0)) }},
		{"CountDownLatch.TrySetCount(negative)", "want more than 0", func() error { return errOf(c.CountDownLatch("l").TrySetCount(ctx, -1)) }},
		{"Lease.Extend(negative)", "at least", func() error { return held.Extend(ctx, -time.Second) }},
		{"Lease.Extend(below MinTTL)", "at least", func() error { return held.Extend(ctx, time.Millisecond) }},
		{"MultiLease.Extend(0)", "at least", func() error { return multi.Extend(ctx, 0) }},

		{"Mutex.Do(nil function)", "nil function", func() error { return c.Mutex("x").Do(ctx, nil) }},
		{"FairMutex.Do(nil function)", "nil function", func() error { return c.FairMutex("x").Do(ctx, nil) }},
		{"RWMutex.Do(nil function)", "nil function", func() error { return c.RWMutex("x").Do(ctx, nil) }},
		{"RWMutex.RDo(nil function)", "nil function", func() error { return c.RWMutex("x").RDo(ctx, nil) }},
		{"MultiLock.Do(nil function)", "nil function", func() error { return c.MultiLock([]string{"x"}).Do(ctx, nil) }},
	}
	// Every name a caller gives: empty, one byte too long, and 64 MiB.
	for _, n := range []struct{ what, name, want string }{
		{"empty name", "", "empty name"},
		{"name of MaxNameLen+1 bytes", long, "MaxNameLen"},
		{"name of 64 MiB", huge, "MaxNameLen"},
	} {
		name := n.name
		rows = append(rows,
			row{"Mutex, " + n.what, n.want, func() error { return errOf(c.Mutex(name).Lock(ctx)) }},
			row{"Mutex.Do, " + n.what, n.want, func() error { return c.Mutex(name).Do(ctx, fn) }},
			row{"FairMutex, " + n.what, n.want, func() error { return errOf(c.FairMutex(name).TryLock(ctx)) }},
			row{"RWMutex, " + n.what, n.want, func() error { return errOf(c.RWMutex(name).RLock(ctx)) }},
			row{"RWMutex.Do, " + n.what, n.want, func() error { return c.RWMutex(name).Do(ctx, fn) }},
			row{"Semaphore, " + n.what, n.want, func() error { return errOf(c.Semaphore(name, 1).Acquire(ctx, 1)) }},
			row{"Semaphore.SetPermits, " + n.what, n.want, func() error { return c.Semaphore(name, 1).SetPermits(ctx, 2) }},
			row{"CountDownLatch, " + n.what, n.want, func() error { return errOf(c.CountDownLatch(name).TrySetCount(ctx, 1)) }},
			row{"CountDownLatch.CountDown, " + n.what, n.want, func() error { return c.CountDownLatch(name).CountDown(ctx) }},
			row{"MultiLock, " + n.what, n.want, func() error { return errOf(c.MultiLock([]string{"a", name}).Lock(ctx)) }},
			row{"Inspect, " + n.what, n.want, func() error { return errOf(c.Inspect(ctx, dlock.KindMutex, name)) }},
			row{"ForceRelease, " + n.what, n.want, func() error { return errOf(c.ForceRelease(ctx, dlock.KindSemaphore, name)) }},
		)
	}

	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			out := callMethod(t, r.name, reflect.ValueOf(r.call), nil)
			if out == nil {
				return // panicked
			}
			err, _ := out[0].Interface().(error)
			switch {
			case err == nil:
				t.Errorf("no error")
			case !strings.Contains(err.Error(), r.want):
				t.Errorf("error %q does not say %q", err, r.want)
			case len(err.Error()) > dlock.MaxNameLen:
				t.Errorf("error of %d bytes: it quotes the name", len(err.Error()))
			}
			if n := sent.take(); n != 0 {
				t.Errorf("sent %d requests to Redis", n)
			}
		})
	}
	if n := len(allKeys(t, rdb)); n != keys {
		t.Errorf("Redis holds %d keys after the bad calls, %d before", n, keys)
	}
	if err := multi.Unlock(ctx); err != nil {
		t.Error(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// errOf returns the error of a call that returns a value and an error.
func errOf[T any](_ T, err error) error { return err }

// callMethod calls m with args on a goroutine of its own and returns its
// results; nil if it panicked (reported as an error of t). It fails t if the
// call blocks.
func callMethod(t *testing.T, name string, m reflect.Value, args []reflect.Value) []reflect.Value {
	t.Helper()
	done := make(chan []reflect.Value, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s panicked: %v", name, p)
				done <- nil
			}
		}()
		done <- m.Call(args)
	}()
	select {
	case out := <-done:
		return out
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked", name)
		return nil
	}
}

// checkRefused checks the results of a call that must be refused: an error
// (also the first yielded by a returned sequence), or, for a method that
// returns none, zero values and closed channels.
func checkRefused(t *testing.T, name string, out []reflect.Value) {
	t.Helper()
	errType := reflect.TypeFor[error]()
	for _, o := range out {
		switch {
		case o.Type() == errType && o.IsNil():
			t.Errorf("%s returned no error", name)
		case o.Type().Kind() == reflect.Chan:
			select {
			case <-o.Interface().(<-chan struct{}):
			default:
				t.Errorf("%s returned an open channel", name)
			}
		case o.Type() == reflect.TypeFor[iter.Seq2[dlock.LockID, error]]():
			first := func() error { return firstErr(o.Interface().(iter.Seq2[dlock.LockID, error])) }
			if out := callMethod(t, name+"'s sequence", reflect.ValueOf(first), nil); out != nil && out[0].IsNil() {
				t.Errorf("%s yielded no error", name)
			}
		}
	}
}

// args returns arguments of the parameters of a method of type mt that a
// caller could pass (argFor), but a nil context if nilCtx is set.
func args(mt reflect.Type, nilCtx bool) []reflect.Value {
	n := mt.NumIn()
	if mt.IsVariadic() {
		n-- // no options
	}
	a := make([]reflect.Value, n)
	for j := range a {
		a[j] = argFor(mt.In(j))
		if nilCtx && mt.In(j) == reflect.TypeFor[context.Context]() {
			a[j] = reflect.Zero(mt.In(j))
		}
	}
	return a
}

// argFor returns an argument of type t that a caller could pass: a live
// context, a function that does nothing, a small number, a lock kind, a
// name.
func argFor(t reflect.Type) reflect.Value {
	switch {
	case t == reflect.TypeFor[context.Context]():
		return reflect.ValueOf(context.Background())
	case t.Kind() == reflect.Func:
		return reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, t.NumOut())
			for i := range out {
				out[i] = reflect.Zero(t.Out(i))
			}
			return out
		})
	case t.Kind() == reflect.Int64:
		return reflect.ValueOf(int64(1)).Convert(t)
	case t == reflect.TypeFor[dlock.Kind]():
		return reflect.ValueOf(dlock.KindMutex)
	case t.Kind() == reflect.String:
		return reflect.ValueOf("x").Convert(t)
	case t.Kind() == reflect.Slice:
		return reflect.MakeSlice(t, 1, 1)
	}
	return reflect.Zero(t)
}
