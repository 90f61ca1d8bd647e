package rclient

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// gatedBatcher returns a Batcher of limit 2 whose calls sent alone wait for
// gate, and whose pipelines are recorded in sizes; each reply is the call's
// first argument.
func gatedBatcher(gate chan struct{}) (*Batcher, *[]int, *sync.Mutex) {
	var (
		mu    sync.Mutex
		sizes []int
	)
	one := func(ctx context.Context, args []any) (any, error) {
		<-gate
		return args[0], nil
	}
	many := func(ctx context.Context, cmds []Cmd) {
		mu.Lock()
		sizes = append(sizes, len(cmds))
		mu.Unlock()
		for i := range cmds {
			cmds[i].Reply = cmds[i].Args[0]
			if cmds[i].Args[0] == "fail" {
				cmds[i].Reply, cmds[i].Err = nil, errors.New("failed")
			}
		}
	}
	b := NewBatcher(one, many)
	b.limit = 2
	return b, &sizes, &mu
}

// waitQueued waits until n calls wait in b's queue.
func waitQueued(t *testing.T, b *Batcher, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
	}
	t.Fatalf("%d calls never queued", n)
}

// TestBatcherBatches: calls beyond the limit wait and go in one pipeline
// when a call in flight returns; each gets its own reply or error.
func TestBatcherBatches(t *testing.T) {
	gate := make(chan struct{})
	b, sizes, mu := gatedBatcher(gate)
	ctx := context.Background()
	type out struct {
		v   any
		err error
	}
	results := make([]chan out, 7)
	call := func(i int, arg string) {
		results[i] = make(chan out, 1)
		go func() {
			v, err := b.Do(ctx, []any{arg})
			results[i] <- out{v, err}
		}()
	}
	call(0, "a0")
	call(1, "a1")
	for {
		b.mu.Lock()
		n := b.inFlight
		b.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	for i := 2; i < 7; i++ {
		arg := "q" + string(rune('0'+i))
		if i == 4 {
			arg = "fail"
		}
		call(i, arg)
	}
	waitQueued(t, b, 5)
	gate <- struct{}{} // one of the two returns: the five go together
	gate <- struct{}{}
	for i, ch := range results {
		o := <-ch
		want := any("q" + string(rune('0'+i)))
		switch {
		case i < 2:
			want = "a" + string(rune('0'+i))
		case i == 4:
			if o.err == nil || o.v != nil {
				t.Errorf("call %d: %v, %v, want its own error", i, o.v, o.err)
			}
			continue
		}
		if o.err != nil || o.v != want {
			t.Errorf("call %d: %v, %v, want %v", i, o.v, o.err, want)
		}
	}
	b.Settle()
	mu.Lock()
	defer mu.Unlock()
	if len(*sizes) != 1 || (*sizes)[0] != 5 {
		t.Fatalf("pipelines %v, want one of 5", *sizes)
	}
	if b.inFlight != 0 || b.sending != 0 {
		t.Fatalf("in flight %d, sending %d after all returned", b.inFlight, b.sending)
	}
}

// TestBatcherCallerLeaves: a waiting call whose context ends returns its
// cause at once; its command is still sent, and Settle waits for that.
func TestBatcherCallerLeaves(t *testing.T) {
	gate := make(chan struct{})
	b, sizes, mu := gatedBatcher(gate)
	bg := context.Background()
	done := make(chan struct{}, 2)
	for range 2 {
		go func() { _, _ = b.Do(bg, []any{"x"}); done <- struct{}{} }()
	}
	for {
		b.mu.Lock()
		n := b.inFlight
		b.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cause := errors.New("caller gave up")
	ctx, cancel := context.WithCancelCause(bg)
	left := make(chan error, 1)
	go func() {
		_, err := b.Do(ctx, []any{"late"})
		left <- err
	}()
	waitQueued(t, b, 1)
	cancel(cause)
	if err := <-left; !errors.Is(err, cause) {
		t.Fatalf("a call whose context ended: %v, want its cause", err)
	}
	close(gate)
	<-done
	<-done
	b.Settle()
	mu.Lock()
	defer mu.Unlock()
	if len(*sizes) != 1 || (*sizes)[0] != 1 {
		t.Fatalf("pipelines %v, want the call that left sent in one of 1", *sizes)
	}
}
