package dlockrueidis

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/rclient"
	"github.com/redis/rueidis"
)

// subscriber is rclient's Subscriber on a dedicated rueidis connection,
// whose pub/sub hooks feed Receive. When the connection breaks, Receive
// returns the error once, and the next Receive takes another connection and
// subscribes again to the channels, as go-redis's PubSub does.
type subscriber struct {
	// node returns the server's own client: a Cluster client's dedicated
	// connections serve one slot each, a server's serve any.
	node   func() (rueidis.Client, error)
	events chan event
	done   chan struct{} // closed by Close, which ends a Receive

	pings sync.WaitGroup // PINGs in flight, which Close waits for

	mu       sync.Mutex
	d        rueidis.DedicatedClient // nil while broken
	cancel   func()
	channels map[string]bool // subscribed, or asked to be
	closed   bool
}

// event is what the hooks and the connection tell Receive.
type event struct {
	m   rclient.Message
	err error
}

// Subscribe returns a connection to the server at addr subscribed to
// channels.
func (c *conn) Subscribe(ctx context.Context, addr string, channels ...string) rclient.Subscriber {
	s := &subscriber{node: func() (rueidis.Client, error) { return c.node(addr) }, events: make(chan event, 1024), done: make(chan struct{}), channels: make(map[string]bool)}
	for _, ch := range channels {
		s.channels[ch] = true
	}
	s.mu.Lock()
	err := s.connect(ctx)
	s.mu.Unlock()
	if err != nil {
		s.push(event{err: err})
	}
	return s
}

// connect takes a dedicated connection, sets its hooks and subscribes it to
// s's channels. s.mu must be held.
func (s *subscriber) connect(ctx context.Context) error {
	node, err := s.node()
	if err != nil {
		return err
	}
	d, cancel := node.Dedicate()
	errs := d.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			s.push(event{m: rclient.Message{Kind: "smessage", Channel: m.Channel, Payload: m.Message}})
		},
		OnSubscription: func(m rueidis.PubSubSubscription) {
			s.push(event{m: rclient.Message{Kind: m.Kind, Channel: m.Channel}})
		},
	})
	s.d, s.cancel = d, cancel
	go func() {
		err, ok := <-errs
		if !ok || err == nil {
			err = io.ErrUnexpectedEOF
		}
		s.mu.Lock()
		if s.d == d {
			s.d = nil
			cancel()
		}
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			s.push(event{err: err})
		}
	}()
	if len(s.channels) == 0 {
		return nil
	}
	chs := make([]string, 0, len(s.channels))
	for ch := range s.channels {
		chs = append(chs, ch)
	}
	return mark(d.Do(ctx, d.B().Ssubscribe().Channel(chs...).Build()).Error())
}

// push hands e to Receive; a full buffer drops a message, which a waiter
// makes up for by asking again.
func (s *subscriber) push(e event) {
	select {
	case s.events <- e:
	default:
	}
}

// current returns the connection, taking another (and subscribing again)
// if the last one broke.
func (s *subscriber) current(ctx context.Context) (rueidis.DedicatedClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, rclient.ErrClosed
	}
	if s.d == nil {
		if err := s.connect(ctx); err != nil {
			return nil, err
		}
	}
	return s.d, nil
}

func (s *subscriber) Subscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	for _, ch := range channels {
		s.channels[ch] = true
	}
	s.mu.Unlock()
	d, err := s.current(ctx)
	if err != nil {
		return err
	}
	return mark(d.Do(ctx, d.B().Ssubscribe().Channel(channels...).Build()).Error())
}

func (s *subscriber) Unsubscribe(ctx context.Context, channels ...string) error {
	s.mu.Lock()
	for _, ch := range channels {
		delete(s.channels, ch)
	}
	s.mu.Unlock()
	d, err := s.current(ctx)
	if err != nil {
		return err
	}
	return mark(d.Do(ctx, d.B().Sunsubscribe().Channel(channels...).Build()).Error())
}

// Ping sends PING; its answer is told to Receive as a "pong".
func (s *subscriber) Ping(ctx context.Context) error {
	d, err := s.current(ctx)
	if err != nil {
		return err
	}
	s.pings.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if d.Do(ctx, d.B().Ping().Build()).Error() == nil {
			s.push(event{m: rclient.Message{Kind: "pong"}})
		}
	})
	return nil
}

func (s *subscriber) Receive(ctx context.Context, timeout time.Duration) (rclient.Message, error) {
	if _, err := s.current(ctx); err != nil {
		return rclient.Message{}, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case e := <-s.events:
		return e.m, e.err
	case <-t.C:
		return rclient.Message{}, errTimeout
	case <-s.done:
		return rclient.Message{}, rclient.ErrClosed
	case <-ctx.Done():
		return rclient.Message{}, ctx.Err()
	}
}

func (s *subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	if s.d != nil {
		s.d.Close()
		s.cancel()
		s.d = nil
	}
	s.mu.Unlock()
	s.pings.Wait()
	return nil
}

// errTimeout is a Receive's that heard nothing in time.
var errTimeout error = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string   { return "receive: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
