package rclient

import (
	"context"
	"runtime"
	"sync"
)

// Batcher lets the calls of goroutines that run at once share round trips,
// for a client that gives up a request at its context's end. A call made
// while fewer than Limit others are in flight goes at once, alone (one). A
// call made while Limit are in flight waits; when one of those returns,
// every call waiting by then goes in one pipeline (many). Redis then reads
// and answers many calls with one read and one write, as the client does,
// and those are most of what a short script costs both.
//
// A caller whose context ends while its call waits or rides a pipeline
// returns the context's error at once; the call may still run, as a request
// whose reply was lost may.
type Batcher struct {
	one  func(ctx context.Context, args []any) (any, error)
	many func(ctx context.Context, cmds []Cmd)

	mu       sync.Mutex
	limit    int
	inFlight int        // calls and pipelines sent and not yet answered
	queue    []*pending // calls waiting for a slot
	spare    []*pending // a drained queue's array, for the next
	cmds     []Cmd      // the pipeline's commands, for the next
	sending  int        // goroutines that send pipelines
	idle     sync.Cond  // signalled when sending drops to zero
}

// pending is a call waiting in a Batcher's queue.
type pending struct {
	cmd  Cmd
	done chan struct{} // receives once cmd has its outcome
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

// NewBatcher returns a Batcher that sends a call alone with one, and calls
// that waited with many, which sets each one's Reply and Err. It keeps at
// most a few requests per CPU in flight before it batches: enough to keep
// Redis and the client busy while the calls beyond them wait for no more
// than about a round trip.
func NewBatcher(one func(ctx context.Context, args []any) (any, error), many func(ctx context.Context, cmds []Cmd)) *Batcher {
	b := &Batcher{one: one, many: many, limit: 4 * runtime.GOMAXPROCS(0)}
	b.idle.L = &b.mu
	return b
}

// Do sends args, alone or in a pipeline, and returns the reply.
func (b *Batcher) Do(ctx context.Context, args []any) (any, error) {
	b.mu.Lock()
	if b.inFlight < b.limit {
		b.inFlight++
		b.mu.Unlock()
		v, err := b.one(ctx, args)
		if batch := b.next(false); batch != nil {
			go b.send(batch)
		}
		return v, err
	}
	q := pendingPool.Get().(*pending)
	q.cmd = Cmd{Args: args}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
		// The sender still writes q's outcome: q is left to it, not pooled.
		return nil, context.Cause(ctx)
	}
	v, err := q.cmd.Reply, q.cmd.Err
	q.cmd = Cmd{}
	pendingPool.Put(q)
	return v, err
}

// next is called when a request of the batcher has been answered, by send
// if sending is set, else by the caller that made it: it returns the calls
// waiting by then, which keep the request's slot and which that caller is
// to send on a new goroutine (send), or nil, and frees the slot, if none is.
func (b *Batcher) next(sending bool) []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inFlight--
		if sending {
			if b.sending--; b.sending == 0 {
				b.idle.Broadcast()
			}
		}
		return nil
	}
	batch := b.queue
	b.queue, b.spare = b.spare[:0], nil
	if !sending {
		b.sending++
	}
	return batch
}

// Settle waits until no goroutine of b sends a pipeline.
func (b *Batcher) Settle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.sending > 0 {
		b.idle.Wait()
	}
}

// send sends batch as one pipeline, and then each batch that has queued
// meanwhile, until none has. It is not bounded by any caller's context:
// the client's own timeouts bound it, and Settle waits for it.
func (b *Batcher) send(batch []*pending) {
	ctx := context.Background()
	b.mu.Lock()
	cmds := b.cmds[:0]
	b.cmds = nil
	b.mu.Unlock()
	for batch != nil {
		cmds = cmds[:0]
		for _, q := range batch {
			cmds = append(cmds, q.cmd)
		}
		b.many(ctx, cmds)
		for i, q := range batch {
			q.cmd = cmds[i]
			q.done <- struct{}{}
			batch[i] = nil
			cmds[i] = Cmd{}
		}
		b.mu.Lock()
		if b.spare == nil {
			b.spare = batch[:0]
		}
		b.mu.Unlock()
		batch = b.next(true)
	}
	b.mu.Lock()
	b.cmds = cmds[:0]
	b.mu.Unlock()
}
