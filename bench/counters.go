package main

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// reqCounter counts, in the client, what one library instance (or a group of
// them, such as the contenders of one window) sends to Redis: requests (every
// command; a script call is one, each command of a pipeline is one) and round
// trips (a command or a whole pipeline is one). Every client a locker opens
// gets the same counter: go-redis clients through a hook, rueidis clients
// through countedRueidis.
type reqCounter struct {
	reqs, rts atomic.Int64
	// noRT: the client cannot tell round trips (rueidis pipelines the
	// commands of concurrent callers onto one connection by itself).
	noRT atomic.Bool
	// unknown: a call was made whose number of requests the client cannot
	// tell (a rueidis cached read, a dedicated connection).
	unknown atomic.Bool
	// extends: dlock's successful renewals and lengthening extends, counted
	// by its Extended hook (each is one of reqs).
	extends atomic.Int64
	// held: dlock acquire script calls answered "held by another" (the reply
	// that carries a fence floor): a waiter registering, not the request
	// that hands the lock on.
	held atomic.Int64
	// direct names the commands go-redis clients sent (a script call as
	// "evalsha" or "eval"), not those scripts ran; nil where the client
	// cannot tell (rueidis).
	mu     sync.Mutex
	direct map[string]struct{}
}

// sent records that the client sent a command called name.
func (c *reqCounter) sent(name string) {
	c.mu.Lock()
	if _, ok := c.direct[name]; !ok {
		if c.direct == nil {
			c.direct = map[string]struct{}{}
		}
		c.direct[name] = struct{}{}
	}
	c.mu.Unlock()
}

// names is a copy of c.direct, nil if c counted nothing through go-redis or
// through rueidis too.
func (c *reqCounter) names() map[string]struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.direct == nil || c.noRT.Load() {
		return nil
	}
	return maps.Clone(c.direct)
}

// reqCounts is a reading of a reqCounter, or a sum of differences of them.
// The zero value is an empty, fully counted sum.
type reqCounts struct {
	reqs, rts     int64
	extends, held int64
	noRT          bool // round trips not counted
	unknown       bool // requests not counted
	direct        map[string]struct{}
}

func (c *reqCounter) snap() reqCounts {
	return reqCounts{reqs: c.reqs.Load(), rts: c.rts.Load(), extends: c.extends.Load(), held: c.held.Load(), noRT: c.noRT.Load(), unknown: c.unknown.Load(), direct: c.names()}
}

// since is c's counts from the reading before until now.
func (c *reqCounter) since(before reqCounts) reqCounts {
	now := c.snap()
	return reqCounts{reqs: now.reqs - before.reqs, rts: now.rts - before.rts, extends: now.extends - before.extends, held: now.held - before.held, noRT: now.noRT, unknown: now.unknown, direct: now.direct}
}

func (a reqCounts) add(b reqCounts) reqCounts {
	direct := a.direct
	if b.direct != nil {
		direct = maps.Clone(b.direct)
		maps.Copy(direct, a.direct)
	}
	return reqCounts{reqs: a.reqs + b.reqs, rts: a.rts + b.rts, extends: a.extends + b.extends, held: a.held + b.held, noRT: a.noRT || b.noRT, unknown: a.unknown || b.unknown, direct: direct}
}

// perOp returns requests and round trips per op, nil where not counted.
func (a reqCounts) perOp(ops float64) (reqs, rts *float64) {
	if ops <= 0 || a.unknown {
		return nil, nil
	}
	reqs = f(float64(a.reqs) / ops)
	if !a.noRT {
		rts = f(float64(a.rts) / ops)
	}
	return reqs, rts
}

// notCounted names the JSON fields a left nil because it could not count them.
func (a reqCounts) notCounted() []string {
	var out []string
	if a.unknown {
		out = append(out, "requests_per_op")
	}
	if a.unknown || a.noRT {
		out = append(out, "round_trips_per_op")
	}
	return out
}

// ---- go-redis ----

func (c *reqCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *reqCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.reqs.Add(1)
		c.rts.Add(1)
		c.sent(cmd.Name())
		err := next(ctx, cmd)
		c.classify(cmd)
		return err
	}
}

func (c *reqCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.reqs.Add(int64(len(cmds)))
		c.rts.Add(1)
		for _, cmd := range cmds {
			c.sent(cmd.Name())
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.classify(cmd)
		}
		return err
	}
}

// classify counts cmd, which has run, in held if it is a dlock acquire
// script call answered "held": a wait (<= -2), a fence floor and the server
// time.
func (c *reqCounter) classify(cmd redis.Cmder) {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return
	}
	// A *redis.Cmd, or a command that embeds one (dlock sends its acquire
	// calls as one that go-redis must not retry).
	sc, ok := cmd.(interface{ Val() any })
	if !ok {
		return
	}
	if v, ok := sc.Val().([]any); ok && len(v) == 3 {
		if w, ok := v[0].(int64); ok && w <= -2 {
			c.held.Add(1)
		}
	}
}

// newRedis opens a go-redis client on addr whose requests rc counts.
func newRedis(addr string, rc *reqCounter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if rc != nil {
		rdb.AddHook(rc)
	}
	return rdb
}

// ---- rueidis ----

// countedRueidis is a rueidis.Client that counts the commands handed to it
// before passing them on. Round trips are not counted (see reqCounter.noRT);
// calls whose requests cannot be told from outside mark the counter unknown.
type countedRueidis struct {
	c  rueidis.Client
	rc *reqCounter
}

func newCountedRueidis(c rueidis.Client, rc *reqCounter) rueidis.Client {
	rc.noRT.Store(true)
	return &countedRueidis{c: c, rc: rc}
}

func (w *countedRueidis) B() rueidis.Builder { return w.c.B() }

func (w *countedRueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	w.rc.reqs.Add(1)
	return w.c.Do(ctx, cmd)
}

func (w *countedRueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	w.rc.reqs.Add(int64(len(multi)))
	return w.c.DoMulti(ctx, multi...)
}

func (w *countedRueidis) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	w.rc.reqs.Add(1)
	return w.c.Receive(ctx, subscribe, fn)
}

func (w *countedRueidis) Close() { w.c.Close() }

// A cached read sends nothing on a hit and several commands on a miss.
func (w *countedRueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	w.rc.unknown.Store(true)
	return w.c.DoCache(ctx, cmd, ttl)
}

func (w *countedRueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	w.rc.unknown.Store(true)
	return w.c.DoMultiCache(ctx, multi...)
}

func (w *countedRueidis) DoStream(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResultStream {
	w.rc.reqs.Add(1)
	return w.c.DoStream(ctx, cmd)
}

func (w *countedRueidis) DoMultiStream(ctx context.Context, multi ...rueidis.Completed) rueidis.MultiRedisResultStream {
	w.rc.reqs.Add(int64(len(multi)))
	return w.c.DoMultiStream(ctx, multi...)
}

func (w *countedRueidis) Dedicated(fn func(rueidis.DedicatedClient) error) error {
	w.rc.unknown.Store(true)
	return w.c.Dedicated(fn)
}

func (w *countedRueidis) Dedicate() (rueidis.DedicatedClient, func()) {
	w.rc.unknown.Store(true)
	return w.c.Dedicate()
}

func (w *countedRueidis) Nodes() map[string]rueidis.Client {
	nodes := w.c.Nodes()
	out := make(map[string]rueidis.Client, len(nodes))
	for addr, n := range nodes {
		out[addr] = &countedRueidis{c: n, rc: w.rc}
	}
	return out
}

func (w *countedRueidis) Mode() rueidis.ClientMode { return w.c.Mode() }

// rueidisBuilder is a LockerOption.ClientBuilder whose client rc counts.
func rueidisBuilder(rc *reqCounter) func(rueidis.ClientOption) (rueidis.Client, error) {
	return func(o rueidis.ClientOption) (rueidis.Client, error) {
		c, err := rueidis.NewClient(o)
		if err != nil {
			return nil, err
		}
		return newCountedRueidis(c, rc), nil
	}
}

// pubsubCounts is the pub/sub (un)subscribe commands a commandstats delta
// holds, as requests and round trips (each waits for Redis to confirm it).
// go-redis sends them on its pub/sub connection without running the client's
// hooks, so they are added to the client-side counts from here: in every
// measured span only the library under test talks to Redis (the admin
// connection sends INFO only), so they are that library's.
func pubsubCounts(perCmd map[string]int64) reqCounts {
	var n int64
	for _, c := range []string{"subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe"} {
		n += perCmd[c]
	}
	return reqCounts{reqs: n, rts: n}
}
