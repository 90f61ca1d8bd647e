// Command election runs a job as the leader of an election: start it in
// several processes, and one at a time does the work, each write fenced by
// its term. SIGTERM (or Ctrl-C) resigns at once, so another leads without
// waiting for the lease to run out. docs/election.md shows this file.
//
//	REDIS_ADDR=localhost:6379 go run ./examples/election
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// fencedSet stands for the resource the leader acts on: it takes a write
// only with a term at least as high as every term it has seen, so a leader
// that was paused past its lease, and replaced, is refused.
// KEYS[1]: the record; ARGV[1]: the term; ARGV[2]: the value.
var fencedSet = redis.NewScript(`
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'term') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'term', ARGV[1], 'value', ARGV[2])
return 1`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()
	me, _ := os.Hostname()
	me = fmt.Sprintf("%s:%d", me, os.Getpid())
	c, err := dlock.New(rdb, dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // resigns whatever this process still leads
	el := c.Election("nightly-report")
	for ctx.Err() == nil {
		err := lead(ctx, el, rdb, me)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, dlock.ErrLockLost):
			log.Printf("lost the leadership: %v; campaigning again", err)
		case err != nil:
			log.Printf("%v; campaigning again", err)
			time.Sleep(time.Second)
		}
	}
}

// lead campaigns, waits until it leads, and works as the leader until the
// leadership ends or ctx does; then it resigns, so the next candidate leads
// at once.
func lead(ctx context.Context, el *dlock.Election, store redis.Scripter, me string) error {
	ld, err := el.Campaign(ctx, me)
	if err != nil {
		return err // ctx ended while in line, or Redis could not be reached
	}
	// Resign works with a done ctx; it returns ErrLockLost after a loss.
	defer ld.Resign(context.WithoutCancel(ctx))
	log.Printf("leading in term %d", ld.Term())

	// Act only within lctx: it ends when ctx does, when the leadership is
	// lost, and at the lease's local deadline at the latest.
	lctx, cancel := ld.Context(ctx)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ok, err := fencedSet.Run(lctx, store, []string{"report:nightly"}, ld.Term(), me).Int()
		switch {
		case lctx.Err() != nil:
			return context.Cause(lctx)
		case err != nil:
			return fmt.Errorf("write the report: %w", err)
		case ok == 0:
			return fmt.Errorf("term %d refused: a later leader has written", ld.Term())
		}
		select {
		case <-lctx.Done():
			return context.Cause(lctx)
		case <-tick.C:
		}
	}
}
