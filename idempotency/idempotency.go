// Package idempotency runs a request once per idempotency key, across
// processes: the first request with a key runs; a duplicate that comes while
// it runs waits for it (or is refused, if so configured) and then gets the
// stored response replayed; a duplicate that comes later gets it at once. A
// key sent again with a different payload is refused. It belongs in front of
// a request that must not take effect twice, such as "submit order", which a
// user may click three times and a client may send again after a timeout.
//
// The run is guarded by a dlock Mutex named after the key: a handler that
// crashes mid-request holds the key only until the lock's lease runs out
// (WithLeaseTTL; by default the dlock Client's TTL, 30s unless the Client
// says otherwise); a duplicate then runs it. A handler under
// lockhttp.Handler also holds the request's lock, which a dead process keeps
// until its own lease ends (lockhttp.DefaultTTL, 10s): give both the same
// TTL. A stored response lives WithKeep (24 hours by default).
//
// What it cannot do: a handler stopped past its lease (a GC pause, a stopped
// VM) and a duplicate that took over may both run; the first response stored
// is the one replayed to every later duplicate. Pass the lock's fence
// (Result.Fence) to what the handler writes, if that matters.
package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// Defaults and limits.
const (
	// DefaultKeep is how long a stored response lives.
	DefaultKeep = 24 * time.Hour
	// DefaultPrefix starts the key of every stored response.
	DefaultPrefix = "dlock:idem:"
	// MaxKeyLen is the longest idempotency key accepted, in bytes.
	MaxKeyLen = 256
)

// Errors of Do, comparable with errors.Is.
var (
	// ErrMismatch: the key was used before with a different fingerprint
	// (another payload). HTTP: 422.
	ErrMismatch = errors.New("idempotency: key reused with a different request")
	// ErrInProgress: a request with the key is running, and the Store was
	// told not to wait (WithoutWaiting). HTTP: 409.
	ErrInProgress = errors.New("idempotency: a request with this key is in progress")
	// ErrBadKey: the key is empty or longer than MaxKeyLen. HTTP: 400.
	ErrBadKey = errors.New("idempotency: bad key")
)

// Store runs requests once per key. It is safe for concurrent use.
type Store struct {
	locks *dlock.Client
	rdb   redis.UniversalClient
	cfg   config
}

// Option configures a Store (given to New, for every Do and Middleware of
// it) or one Middleware (given to Store.Middleware, over the Store's, for
// that Middleware alone).
type Option func(*config) error

// config is everything an Option can set.
type config struct {
	prefix     string
	keep       time.Duration
	ttl        time.Duration // of the lock that guards a run; 0: the Client's
	wait       bool
	requireKey bool  // Middleware only
	maxBody    int64 // Middleware only
}

// with returns a copy of c with opts applied; op names the call for errors.
func (c config) with(op string, opts []Option) (config, error) {
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("idempotency: %s: nil Option", op)
		}
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithKeep sets how long a stored response lives. Default: DefaultKeep (24h).
func WithKeep(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond {
			return fmt.Errorf("idempotency: WithKeep(%v): want at least 1ms", d)
		}
		c.keep = d
		return nil
	}
}

// WithLeaseTTL sets the TTL of the lock that guards a run: how long a key
// stays taken after the process running it died. Default: the dlock
// Client's TTL. For a handler under lockhttp.Handler, set it to the TTL of
// the request's lock (lockhttp.DefaultTTL, 10s, unless set there).
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < dlock.MinTTL {
			return fmt.Errorf("idempotency: WithLeaseTTL(%v): want at least %v", d, dlock.MinTTL)
		}
		c.ttl = d
		return nil
	}
}

// WithoutWaiting makes a duplicate that comes while its key runs fail at once
// with ErrInProgress (Middleware: 409 with Retry-After: 1), instead of
// waiting for the stored response.
func WithoutWaiting() Option {
	return func(c *config) error {
		c.wait = false
		return nil
	}
}

// WithPrefix sets the text that starts the key of every stored response.
// Default: DefaultPrefix ("dlock:idem:").
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("idempotency: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix)
		}
		c.prefix = prefix
		return nil
	}
}

// RequireKey makes Middleware answer a request without an Idempotency-Key
// header with 400. Default: such a request is passed to the handler as it
// is, unguarded. Do ignores it.
func RequireKey() Option {
	return func(c *config) error {
		c.requireKey = true
		return nil
	}
}

// MaxBody sets the largest request body Middleware reads to fingerprint it;
// a larger one is answered with 413. Default: DefaultMaxBody (1 MiB). Do
// ignores it.
func MaxBody(n int64) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("idempotency: MaxBody(%d): want 0 or more", n)
		}
		c.maxBody = n
		return nil
	}
}

// New returns a Store that guards runs with locks and stores responses in
// rdb (the Redis locks is on, or another).
func New(locks *dlock.Client, rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	switch {
	case locks.ID() == "": // nil or zero
		return nil, errors.New("idempotency: New: nil or zero dlock Client; get one from dlock.New")
	case isNil(rdb):
		return nil, errors.New("idempotency: New: nil Redis client")
	}
	cfg, err := config{prefix: DefaultPrefix, keep: DefaultKeep, wait: true, maxBody: DefaultMaxBody}.with("New", opts)
	if err != nil {
		return nil, err
	}
	return &Store{locks: locks, rdb: rdb, cfg: cfg}, nil
}

// Result is what Do returns.
type Result struct {
	Response []byte // the run's response, stored or replayed
	Replayed bool   // from an earlier run; this call ran nothing
	Fence    int64  // of the lock that guarded this call's run; 0 if replayed
}

// stored is a response as Redis keeps it.
type stored struct {
	Fingerprint string `json:"fp"`
	Response    []byte `json:"r"`
}

// Do runs fn once for key: if a response for key is stored, it returns it
// (Replayed); if a request with key is running, it waits for it (ctx bounds
// the wait; WithoutWaiting: it returns ErrInProgress) and returns its
// response; otherwise it runs fn, with a context
// that is cancelled if the guarding lock is lost, and stores what fn
// returns. fingerprint identifies the request (say, a hash of its method,
// path and body): a key seen with another fingerprint gives ErrMismatch. If
// fn fails, nothing is stored and its error is returned: the key is free for
// another try. keep, if true, stores fn's response; false returns it
// without storing (a response that asks to be retried, such as an HTTP 503
// or 409).
//
// A first run of a key makes four round trips to Redis: the lock's acquire
// and release, and two of Do's own, one before fn and one after.
func (s *Store) Do(ctx context.Context, key, fingerprint string, fn func(ctx context.Context) (response []byte, keep bool, err error)) (Result, error) {
	switch {
	case s == nil || s.locks == nil:
		return Result{}, errors.New("idempotency: Do of a nil or zero Store; get one from New")
	case ctx == nil:
		return Result{}, errors.New("idempotency: Do: nil context")
	case fn == nil:
		return Result{}, errors.New("idempotency: Do: nil function")
	case key == "" || len(key) > MaxKeyLen:
		return Result{}, fmt.Errorf("%w: %d bytes, want 1 to %d", ErrBadKey, len(key), MaxKeyLen)
	case fingerprint == "":
		return Result{}, errors.New("idempotency: Do: empty fingerprint")
	}
	k := keys{fp: s.cfg.prefix + "{" + key + "}:fp", resp: s.cfg.prefix + "{" + key + "}:resp"}
	var opts []dlock.Option
	if s.cfg.ttl > 0 {
		opts = append(opts, dlock.WithTTL(s.cfg.ttl))
	}
	m := s.locks.Mutex("idem:"+key, opts...)
	// A first run finds the key free: it takes the lock, then claims the key
	// and looks for a stored response in one round trip, and stores its own
	// in one more. A request that finds the lock taken claims and looks
	// first, so that another payload is refused, and a stored response
	// replayed, while a run holds the lock; then it waits (or is refused).
	l, err := m.TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() == nil {
		if r, ok, err := s.check(ctx, key, k, fingerprint); ok || err != nil {
			return r, err
		}
		if !s.cfg.wait {
			return Result{}, ErrInProgress
		}
		l, err = m.Lock(ctx)
	}
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: take key %q: %w", key, err)
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	// Also after a wait: the run that held the lock may have stored its
	// response.
	if r, ok, err := s.check(ctx, key, k, fingerprint); ok || err != nil {
		return r, err
	}
	lctx, cancel := l.Context(ctx)
	defer cancel()
	resp, keep, err := fn(lctx)
	if err != nil {
		return Result{}, err
	}
	r := Result{Response: resp, Fence: l.Fence()}
	if !keep {
		return r, nil
	}
	b, err := json.Marshal(stored{Fingerprint: fingerprint, Response: resp})
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: store the response of %q: %w", key, err)
	}
	if err := l.Err(); err != nil {
		return Result{}, fmt.Errorf("idempotency: key %q: the run lost its lock, its response is not stored: %w", key, err)
	}
	// The first response stored stands (a run that lost its lock may finish
	// after another run took over). The one found may be this run's own: a
	// retry of the store whose reply was lost finds it. The claim lives as
	// long as the response.
	pipe := s.rdb.Pipeline()
	set := pipe.SetArgs(ctx, k.resp, b, redis.SetArgs{Mode: "NX", Get: true, TTL: s.cfg.keep})
	pipe.PExpire(ctx, k.fp, s.cfg.keep)
	_, _ = pipe.Exec(ctx) // each command's error is its own
	prev, err := set.Result()
	switch {
	case errors.Is(err, redis.Nil): // stored
	case err != nil:
		return Result{}, fmt.Errorf("idempotency: store the response of %q: %w", key, err)
	case prev != string(b):
		return replayed(key, fingerprint, []byte(prev))
	}
	return r, nil
}

// keys are the Redis keys of an idempotency key: its claim, which holds the
// fingerprint of the first request that used it, and its stored response.
// They share a hash slot.
type keys struct{ fp, resp string }

// check claims key for fingerprint unless another request claimed it
// first (then it returns ErrMismatch, unless that request had the same
// fingerprint) and returns the response stored for key, if there is one
// (ok): one round trip.
func (s *Store) check(ctx context.Context, key string, k keys, fingerprint string) (r Result, ok bool, err error) {
	pipe := s.rdb.Pipeline()
	claim := pipe.SetArgs(ctx, k.fp, fingerprint, redis.SetArgs{Mode: "NX", Get: true, TTL: s.cfg.keep})
	get := pipe.Get(ctx, k.resp)
	_, _ = pipe.Exec(ctx) // each command's error is its own
	fp, err := claim.Result()
	switch {
	case errors.Is(err, redis.Nil): // claimed now
	case err != nil:
		return Result{}, false, fmt.Errorf("idempotency: claim key %q: %w", key, err)
	case fp != fingerprint:
		return Result{}, false, ErrMismatch
	}
	b, err := get.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return Result{}, false, nil
	case err != nil:
		return Result{}, false, fmt.Errorf("idempotency: read the response of %q: %w", key, err)
	}
	r, err = replayed(key, fingerprint, b)
	return r, err == nil, err
}

// isNil reports whether v is nil, or an interface holding a nil pointer,
// func, map, slice or channel.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// replayed decodes b, the response stored for key, for a request with
// fingerprint.
func replayed(key, fingerprint string, b []byte) (Result, error) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil {
		return Result{}, fmt.Errorf("idempotency: the stored response of %q: %w", key, err)
	}
	if st.Fingerprint != fingerprint {
		return Result{}, ErrMismatch
	}
	return Result{Response: st.Response, Replayed: true}, nil
}
