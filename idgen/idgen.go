// Package idgen makes 64-bit ids that are unique across processes, from
// Redis: time-ordered order numbers for a flash sale, or anything else that
// needs ids no two processes hand out twice.
//
// An id is (second << 32) | sequence, a positive int64: the second (since
// Epoch) in which Redis reserved it, by Redis's clock, and its place among
// that second's ids. One script call reserves a block of ids (WithBlock,
// 100 by default), which the Generator then hands out without a round trip.
//
// Ordering: the ids one Generator hands out increase. Across Generators
// (processes) ids are ordered by the second their block was reserved in;
// within a second, blocks of different Generators interleave, and a
// Generator hands out what is left of a block for at most a second after it
// reserved it (then it reserves a fresh one), so an id is at most a second
// older than the moment it was handed out. Unused ids of a block are skipped:
// ids have gaps, never duplicates.
//
// Never backwards: the second comes from Redis's clock and never goes back
// in the stored state (a clock stepped back, or a failover to a server whose
// clock is behind, goes on from the stored second). No id is handed out of a
// second the clock has not reached (but in that case), so a state that is
// gone (a restart without persistence, a failover to a replica that never
// had it, expiry after a day unused) begins at the next second, past every
// id handed out before: the first Next after that waits for it, under a
// second. A failover to a replica that has an older state takes longer than
// a second (Sentinel's detection alone does), so the new primary's clock is
// past the lost ids' second, as long as it is not behind the old one's by
// more than the failover lasted: the same assumption dlock's fences make.
package idgen

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Epoch is the Unix time ids count their seconds from: 2026-01-01T00:00:00Z.
// The 31 bits of the second last until 2094.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Defaults and limits.
const (
	// DefaultBlock is how many ids one round trip reserves, when WithBlock
	// is not given.
	DefaultBlock = 100
	// MaxBlock is the most ids a block may hold: one second's sequences.
	MaxBlock = 1 << 32
	// DefaultPrefix starts the key of every Generator unless WithPrefix says
	// otherwise.
	DefaultPrefix = "dlock:idgen:"
)

// blockLife is how long a Generator hands out ids of a block after it
// reserved it; stateIdle how long an unused generator's state lives in Redis.
const (
	blockLife = time.Second
	stateIdle = 24 * time.Hour
)

//go:embed next.lua
var nextLua string

var nextScript = redis.NewScript(nextLua)

// Generator hands out the ids of one name. It is safe for concurrent use;
// make one per name and process, and share it.
type Generator struct {
	rdb   redis.UniversalClient
	name  string
	key   string
	block int64

	mu        sync.Mutex
	second    int64     // of the current block
	next, end int64     // the current block's unused sequences: [next, end)
	reserved  time.Time // when the current block was reserved
	lastID    int64
}

// Option configures a Generator.
type Option func(*Generator) error

// WithBlock sets how many ids one round trip to Redis reserves, 1 to
// MaxBlock. Larger blocks make fewer round trips and longer runs of one
// Generator's ids within a second; ids a Generator does not use within a
// second of reserving them are skipped. Default: DefaultBlock (100).
func WithBlock(n int64) Option {
	return func(g *Generator) error {
		if n < 1 || n > MaxBlock {
			return fmt.Errorf("idgen: WithBlock(%d): want 1 to %d", n, int64(MaxBlock))
		}
		g.block = n
		return nil
	}
}

// WithPrefix sets the text before the name in the generator's Redis key.
// Default: DefaultPrefix ("dlock:idgen:").
func WithPrefix(prefix string) Option {
	return func(g *Generator) error {
		g.key = prefix + "{" + g.name + "}"
		return nil
	}
}

// New returns the Generator of name on rdb. Generators of the same name on
// the same Redis hand out distinct ids, in any process. New does not contact
// Redis.
func New(rdb redis.UniversalClient, name string, opts ...Option) (*Generator, error) {
	switch {
	case rdb == nil:
		return nil, errors.New("idgen: New: nil Redis client")
	case name == "":
		return nil, errors.New("idgen: New: empty name")
	}
	g := &Generator{rdb: rdb, name: name, key: DefaultPrefix + "{" + name + "}", block: DefaultBlock}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("idgen: New: nil Option")
		}
		if err := o(g); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Next returns the next id: from the current block, or from a new one
// reserved with one script call if the block is used up or more than a
// second old. A Redis failure comes back wrapped, and no id is handed out.
func (g *Generator) Next(ctx context.Context) (int64, error) {
	if g == nil || g.rdb == nil {
		return 0, errors.New("idgen: Next of a nil or zero Generator; get one from New")
	}
	if ctx == nil {
		return 0, errors.New("idgen: Next: nil context")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next >= g.end || time.Since(g.reserved) >= blockLife {
		if err := g.reserve(ctx); err != nil {
			return 0, err
		}
	}
	id := g.second<<32 | g.next
	g.next++
	if id <= g.lastID {
		// The script never hands out a second that goes back; this would
		// take a state rewritten by hand.
		return 0, fmt.Errorf("idgen: %q: Redis handed out %d after %d: its state went back", g.name, id, g.lastID)
	}
	g.lastID = id
	return id, nil
}

// reserve reserves a new block, waiting (within ctx) while Redis says its
// clock has not reached the generator's second yet. g.mu must be held.
func (g *Generator) reserve(ctx context.Context) error {
	for {
		sent := time.Now()
		v, err := nextScript.Run(ctx, g.rdb, []string{g.key}, Epoch.Unix(), g.block, int64(stateIdle/time.Second)).Int64Slice()
		switch {
		case err != nil:
			return fmt.Errorf("idgen: reserve ids of %q: %w", g.name, err)
		case len(v) != 2 || v[0] < -1 || v[0] >= 1<<31 || v[1] < 0:
			return fmt.Errorf("idgen: reserve ids of %q: unexpected reply %v", g.name, v)
		case v[0] >= 0:
			g.second, g.next, g.end, g.reserved = v[0], v[1], v[1]+g.block, sent
			return nil
		}
		t := time.NewTimer(time.Duration(v[1]) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("idgen: reserve ids of %q: waiting for the next second: %w", g.name, context.Cause(ctx))
		}
	}
}

// Second returns the second in which id's block was reserved, by Redis's
// clock.
func Second(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>32) * time.Second)
}

// Sequence returns id's place among the ids of its second.
func Sequence(id int64) int64 { return id & (1<<32 - 1) }
