package dlock

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier receives "lock released" messages for a Client on one shared
// pub/sub connection and passes each to one waiter of that lock in this
// process, through the lock's gate.
//
// Pub/sub delivers at most once: a message sent while the connection is down
// is lost. Waiters therefore never rely on it alone: every wait is also bounded
// by the holder's remaining TTL. After the connection breaks, every gate is
// woken so that waiters look again at once.
type notifier struct {
	c *Client

	mu     sync.Mutex
	ps     *redis.PubSub // nil until the first wait
	gates  map[string]*gate
	idle   *list.List // channels without waiters, oldest first, still subscribed
	closed bool
	done   chan struct{} // closed when the receive loop exits
}

// gate is where one lock's waiters in this process wait for a release.
type gate struct {
	channel string
	wake    chan struct{} // capacity 1: a message wakes one waiter, never blocks the notifier
	ready   chan struct{} // closed when Redis confirmed the subscription, or it failed
	readyOK bool
	subErr  error // why the subscription failed; set before ready is closed
	refs    int           // waiters using the gate
	idle    *list.Element // in notifier.idle while refs == 0
}

// maxIdleGates is how many channels stay subscribed with nobody waiting, so
// that a lock contended over and over is not subscribed again for every wait.
const maxIdleGates = 256

// healthCheck is how long the receive loop waits in silence before it pings
// the pub/sub connection to learn whether it is still alive.
const healthCheck = 30 * time.Second

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, gates: make(map[string]*gate), idle: list.New(), done: make(chan struct{})}
}

// join returns the gate of channel, subscribed: Redis has confirmed the
// subscription when join returns, so any release after that wakes the gate.
// Every join must be followed by one leave.
func (n *notifier) join(ctx context.Context, channel string) (*gate, error) {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	if n.ps == nil {
		n.ps = n.c.rdb.Subscribe(context.Background())
		go n.receive(n.ps)
	}
	g := n.gates[channel]
	subscribe := g == nil
	if subscribe {
		g = &gate{channel: channel, wake: make(chan struct{}, 1), ready: make(chan struct{})}
		n.gates[channel] = g
	}
	if g.idle != nil {
		n.idle.Remove(g.idle)
		g.idle = nil
	}
	g.refs++
	ps := n.ps
	n.mu.Unlock()

	if subscribe {
		if err := ps.Subscribe(ctx, channel); err != nil {
			err = fmt.Errorf("dlock: subscribe to %s: %w", channel, err)
			n.fail(g, err)
			return nil, err
		}
	}
	select {
	case <-g.ready:
		if g.subErr != nil {
			n.leave(g)
			return nil, g.subErr
		}
		return g, nil
	case <-ctx.Done():
		n.leave(g)
		return nil, ctx.Err()
	case <-n.c.closing:
		n.leave(g)
		return nil, ErrClosed
	}
}

// joinSubscribed is join for a channel whose subscription is in place
// already; it returns nil, and joins nothing, otherwise.
func (n *notifier) joinSubscribed(channel string) *gate {
	n.mu.Lock()
	defer n.mu.Unlock()
	g := n.gates[channel]
	if n.closed || g == nil || !g.readyOK {
		return nil
	}
	if g.idle != nil {
		n.idle.Remove(g.idle)
		g.idle = nil
	}
	g.refs++
	return g
}

// fail forgets a gate whose subscription failed, so that the next join tries
// again, and tells the waiters that joined it meanwhile.
func (n *notifier) fail(g *gate, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	g.refs--
	if n.gates[g.channel] == g {
		delete(n.gates, g.channel)
	}
	if !g.readyOK {
		g.subErr = err
		g.readyOK = true
		close(g.ready)
	}
}

// leave gives back a gate from join. A gate nobody waits on stays subscribed
// until maxIdleGates newer ones are idle.
func (n *notifier) leave(g *gate) {
	n.mu.Lock()
	g.refs--
	var evict []string
	if g.refs == 0 && n.gates[g.channel] == g {
		select { // a wake-up nobody took is stale for whoever comes next
		case <-g.wake:
		default:
		}
		g.idle = n.idle.PushBack(g)
		for n.idle.Len() > maxIdleGates {
			old := n.idle.Remove(n.idle.Front()).(*gate)
			old.idle = nil
			delete(n.gates, old.channel)
			evict = append(evict, old.channel)
		}
	}
	ps, closed := n.ps, n.closed
	n.mu.Unlock()
	if len(evict) > 0 && !closed {
		// Best effort: a failure leaves a harmless subscription behind.
		_ = ps.Unsubscribe(context.Background(), evict...)
	}
}

// signal wakes one waiter of g, if none is already due to wake.
func (g *gate) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// receive reads the pub/sub connection until the notifier closes.
func (n *notifier) receive(ps *redis.PubSub) {
	defer close(n.done)
	ctx := context.Background()
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthCheck)
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return
			}
			if isTimeout(err) {
				_ = ps.Ping(ctx) // a dead connection fails the next receive, which reconnects
				continue
			}
			// The connection broke; go-redis reconnects and subscribes again
			// on the next receive. Releases sent meanwhile were lost: wake
			// every gate so its waiters look for themselves.
			n.c.log.Warn("dlock: release notifications interrupted", "err", err)
			n.wakeAll()
			select {
			case <-n.c.closing:
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			n.mu.Lock()
			if g := n.gates[m.Channel]; g != nil && g.refs > 0 {
				g.signal() // a gate nobody waits on keeps no wake-up for later
			}
			n.mu.Unlock()
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			n.mu.Lock()
			if g := n.gates[m.Channel]; g != nil && !g.readyOK {
				g.readyOK = true
				close(g.ready)
			}
			n.mu.Unlock()
		}
	}
}

func (n *notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.gates {
		if g.refs > 0 {
			g.signal()
		}
	}
}

// close closes the pub/sub connection and waits for the receive loop.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	ps := n.ps
	n.mu.Unlock()
	if ps == nil {
		return
	}
	_ = ps.Close()
	<-n.done
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
