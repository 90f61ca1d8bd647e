package goredis

import (
	"context"
	"runtime"
	"sync"

	"github.com/redis/go-redis/v9"
)

// batcher lets the script calls of goroutines that run at once share round
// trips. A call made while fewer than limit others are in flight goes at
// once, alone, as it would without a batcher. A call made while limit are in
// flight waits; when one of those returns, every call waiting by then goes
// in one pipeline. Redis then reads and answers many calls with one read and
// one write, as the client does, and those are most of what a short script
// costs both.
//
// Each call still carries its own reply or error. A pipeline that fails on
// the network is sent again by go-redis as a whole, which the scripts allow:
// each gives the same outcome when run twice.
type batcher struct {
	rdb   redis.UniversalClient
	limit int

	mu       sync.Mutex
	inFlight int        // calls and pipelines sent and not yet answered
	queue    []*batched // calls waiting for a slot
	spare    []*batched // a drained queue's array, for the next
	sending  int        // goroutines that send pipelines
	idle     sync.Cond  // signalled when sending drops to zero
}

// batched is a call waiting in a batcher's queue.
type batched struct {
	cmd  redis.Cmder
	done chan struct{} // receives once the reply is in cmd
}

var batchedPool = sync.Pool{New: func() any { return &batched{done: make(chan struct{}, 1)} }}

// newBatcher returns a batcher on rdb that keeps at most limit requests in
// flight before it starts to batch them.
func newBatcher(rdb redis.UniversalClient) *batcher {
	b := &batcher{rdb: rdb, limit: batchLimit()}
	b.idle.L = &b.mu
	return b
}

// batchLimit is how many requests a batcher sends one by one before it
// batches: a few per CPU, enough to keep Redis and the client busy while the
// calls made beyond them wait for no more than about a round trip. With 64
// goroutines on distinct locks, 2, 4 and 8 per GOMAXPROCS gave the same
// throughput within the noise of the in-package BenchmarkParallel, and 16
// less.
func batchLimit() int { return 4 * runtime.GOMAXPROCS(0) }

// Process sends cmd and returns when its reply is in. It does not give up at
// ctx's end: the Redis client's own timeouts bound it, as they bound a
// request of a Redis client made without ContextTimeoutEnabled.
func (b *batcher) Process(ctx context.Context, cmd redis.Cmder) error {
	b.mu.Lock()
	if b.inFlight < b.limit {
		b.inFlight++
		b.mu.Unlock()
		err := b.rdb.Process(ctx, cmd)
		if batch := b.next(false); batch != nil {
			go b.send(batch)
		}
		return err
	}
	q := batchedPool.Get().(*batched)
	q.cmd = cmd
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	<-q.done
	q.cmd = nil
	batchedPool.Put(q)
	return cmd.Err()
}

// next is called when a request of the batcher has been answered, by send
// if sending is set, else by the caller that made it: it returns the calls
// waiting by then, which keep the request's slot and which that caller is
// to send on a new goroutine (send), or nil, and frees the slot, if none is.
func (b *batcher) next(sending bool) []*batched {
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
func (b *batcher) Settle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.sending > 0 {
		b.idle.Wait()
	}
}

// send sends batch as one pipeline, and then each batch that has queued
// meanwhile, until none has. Callers wait for each of its calls, so it ends
// when they have their replies; Client.Close waits for it (settle).
func (b *batcher) send(batch []*batched) {
	ctx := context.Background()
	for batch != nil {
		pipe := b.rdb.Pipeline()
		for _, q := range batch {
			_ = pipe.Process(ctx, q.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for i, q := range batch {
			q.done <- struct{}{}
			batch[i] = nil
		}
		b.mu.Lock()
		if b.spare == nil {
			b.spare = batch[:0]
		}
		b.mu.Unlock()
		batch = b.next(true)
	}
}
