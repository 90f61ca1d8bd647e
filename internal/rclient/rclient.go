// Package rclient is the seam between dlock and a Redis client library: the
// few things dlock sends to Redis and needs back, for one deployment (a
// server, a Sentinel's primary, or a Cluster). internal/protocol and
// internal/notify speak to Redis only through a Client; go-redis fills it
// in (rclient/goredis), and any other client does by implementing Client
// and Subscriber with the promises written here, notably that a command
// sent once is never sent again by the client itself, and that a
// Subscriber reconnects and subscribes again by itself.
//
// Replies are decoded to Go values: an integer is an int64, a string or a
// status a string, an array a []any of these, a nil reply nil with no
// error; a map (RESP3) a map[any]any. An error reply of the server is an
// error that satisfies ReplyError.
package rclient

import (
	"context"
	"errors"
	"time"
)

// Client is one Redis deployment as dlock uses it. It must be safe for
// concurrent use.
type Client interface {
	// Do sends one command to the server that serves its first key (any
	// server, for a command without keys), and returns the reply. The
	// client may send it again by itself after a failure on the way, as its
	// own retries allow: dlock sends this way only what gives the same
	// outcome if it runs twice.
	Do(ctx context.Context, args ...any) (any, error)
	// Once sends a script call (EVAL or EVALSHA and the rest; its first key
	// at args[3]) once: the client must not send it again by itself, since
	// a copy whose reply was lost may still run after a second one's, and
	// dlock decides when that is safe. Calls made at once by many callers
	// may share a round trip.
	Once(ctx context.Context, args []any) (any, error)
	// Pipe sends cmds, each routed by its first key, in one round trip per
	// server, with the client's own retries, and sets each one's Reply and
	// Err.
	Pipe(ctx context.Context, cmds []Cmd) error
	// PipeAt sends cmds in one round trip on one connection to the server at
	// addr, each sent once, after ASKING if asking is set (a slot on its way
	// to addr), and sets each one's Reply and Err: a WAIT among them counts
	// the writes of those before it.
	PipeAt(ctx context.Context, addr string, asking bool, cmds []Cmd) error
	// DoAt is Do on the server at addr.
	DoAt(ctx context.Context, addr string, args ...any) (any, error)

	// ServerOf returns the address of the server that serves key: on a
	// Cluster, the primary of its slot; elsewhere the one server's.
	ServerOf(ctx context.Context, key string) (string, error)
	// Primaries returns the address of every primary that holds keys.
	Primaries(ctx context.Context) ([]string, error)
	// Reload has the client load a Cluster's slot map again, in the
	// background; elsewhere it does nothing.
	Reload()
	// Scan passes each key that matches the glob match to each, on every
	// primary, until each returns false (SCAN, never KEYS).
	Scan(ctx context.Context, match string, each func(key string) bool) error

	// Subscribe returns a new pub/sub connection to the server at addr
	// (ServerOf; "" on a Single deployment), subscribed to the shard
	// channels (SSUBSCRIBE), which that server serves: one connection
	// carries channels of every slot of its server. The subscriptions'
	// confirmations arrive as Messages.
	Subscribe(ctx context.Context, addr string, channels ...string) Subscriber

	// Settings are what dlock must know of how the client sends.
	Settings() Settings
	// Settle waits for what the client sends on goroutines of its own on
	// behalf of calls that have returned.
	Settle()
}

// Cmd is one command of a pipeline, and its outcome.
type Cmd struct {
	Args  []any
	Reply any
	Err   error
}

// Topology is how a deployment spreads its keys.
type Topology uint8

const (
	// Single: one primary holds every key (a server, or Sentinel's).
	Single Topology = iota
	// Cluster: a Redis Cluster; each slot's primary holds its keys.
	Cluster
	// Sharded: the client spreads keys over servers by itself (a go-redis
	// Ring): no server can be named for a key.
	Sharded
)

// Settings are what the layers above must know of how a client sends.
type Settings struct {
	Topology Topology
	// CtxAware: a request gives up at its context's end by itself.
	CtxAware bool
	// Retry is how the client sends a command again after a failure on the
	// way: dlock sends a script call again as the client would.
	Retry Retry
	// ReadTimeout bounds a reply's wait; 0 if unbounded.
	ReadTimeout time.Duration
	// Addr is the server's address on a Single deployment ("" if unknown).
	Addr string
}

// Retry is a client's policy for sending a command again: at most Max
// times more, after a random pause from MinBackoff, growing with each try,
// up to MaxBackoff.
type Retry struct {
	Max                    int
	MinBackoff, MaxBackoff time.Duration
}

// Subscriber is a pub/sub connection of shard channels. After its
// connection breaks, the next Receive connects again and subscribes again
// to its channels, by itself.
type Subscriber interface {
	// Subscribe and Unsubscribe send SSUBSCRIBE and SUNSUBSCRIBE of
	// channels; their confirmations arrive as Messages.
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	// Receive returns the next message, or an error after timeout with
	// nothing from the server (one that Timeout reports).
	Receive(ctx context.Context, timeout time.Duration) (Message, error)
	// Ping sends PING on the connection; its answer arrives as a Message.
	Ping(ctx context.Context) error
	Close() error
}

// Message is what a Subscriber received.
type Message struct {
	// Kind is "smessage" for a published message, or the command a
	// confirmation answers ("ssubscribe", "sunsubscribe"), or "pong".
	Kind    string
	Channel string
	Payload string
}

// ReplyError is an error reply of the server (go-redis's redis.Error has
// this method set).
type ReplyError interface {
	error
	RedisError()
}

// Reply returns the text of the server's error reply err is or wraps.
func Reply(err error) (string, bool) {
	var r ReplyError
	if err == nil || !errors.As(err, &r) {
		return "", false
	}
	return r.Error(), true
}

// ErrClosed marks the error of a command sent through a closed client;
// ErrPoolTimeout, of one that found no free connection in time (it did not
// leave). A Client's errors match them (errors.Is) where they apply.
var (
	ErrClosed      = errors.New("client is closed")
	ErrPoolTimeout = errors.New("connection pool timeout")
)

// Timeout reports whether err is a Receive's that heard nothing in time.
func Timeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
