package notify

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestReconnect: when the notifier's connection is lost, a waiter is woken
// without a grant (messages sent meanwhile are lost, so it must ask again),
// and a new connection has the channel subscribed again and delivers what is
// published next. The connection is lost two ways: the server closes it (the
// notifier reads an error), or it goes half-open (the notifier hears
// nothing, and the health check's PING gets no answer).
func TestReconnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		via  func(t *testing.T, srv *redistest.Server) (addr string, cut func(t *testing.T, e *env))
		// broken: the notifier read an error, and told the backend.
		broken bool
	}{{
		name: "killed",
		cfg:  DefaultConfig,
		via: func(t *testing.T, srv *redistest.Server) (string, func(t *testing.T, e *env)) {
			return "", func(t *testing.T, e *env) {
				n, err := e.admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Int()
				if err != nil || n != 1 {
					t.Fatalf("CLIENT KILL TYPE pubsub: %d killed, %v; want the notifier's 1", n, err)
				}
			}
		},
		broken: true,
	}, {
		name: "half-open",
		// Silent for a moment: ping. No answer for a second: connect again.
		cfg: Config{MaxIdleGates: 256, HealthCheck: 20 * time.Millisecond, PongWait: time.Second},
		via: func(t *testing.T, srv *redistest.Server) (string, func(t *testing.T, e *env)) {
			p := faultproxy.Start(t, srv.Addr)
			return p.Addr(), func(t *testing.T, e *env) {
				if n := p.BlackholePubSub(); n != 1 {
					t.Fatalf("%d pub/sub connections made half-open, want the notifier's 1", n)
				}
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var cut func(t *testing.T, e *env)
			e := start(t, tc.cfg, func(srv *redistest.Server) (addr string) {
				addr, cut = tc.via(t, srv)
				return addr
			})
			g := e.join(t, "x")
			w := e.n.Enter(g, "o1")
			before := e.conns(t)
			if len(before) != 1 {
				t.Fatalf("pub/sub connections %+v, want 1", before)
			}

			cut(t, e)
			if m := next(t, w, "connection lost"); m != (protocol.Wake{}) {
				t.Errorf("the waiter got %+v, want the wake-up of a lost connection (no owner, no grant)", m)
			}
			e.b.mu.Lock()
			failed := len(e.b.failed)
			e.b.mu.Unlock()
			if tc.broken && failed == 0 {
				t.Error("the backend was not told of the broken connection (Failed)")
			}
			// Half-open, the old connection stays open on the server's side
			// (as it would until TCP gives up on it): its messages are lost.
			eventually(t, "a new pub/sub connection with the channel", func() bool {
				return slices.ContainsFunc(e.conns(t), func(c conn) bool { return c.id != before[0].id && c.ssub == 1 })
			})
			if !slices.Contains(e.n.ReadyChannels(), g.channel) {
				t.Errorf("channel not ready after the reconnection")
			}
			e.publish(t, g.channel, "o1 7 500 1")
			if m := next(t, w, "grant after the reconnection"); m.Owner != "o1" || m.Fence != 7 {
				t.Errorf("the waiter got %+v, want its grant, fence 7", m)
			}
			e.n.Exit(g, w, false, 0)
			e.n.Leave(g)
		})
	}
}

// TestSlotMoved: when a waiter's Check finds its channel served elsewhere
// (on a Cluster, its slot moved), the waiters are woken without a grant, the
// slot map is reloaded, and the channel is subscribed where it lives now and
// let go where it was. The test's "elsewhere" is a second connection to the
// same server, which the backend names as another shard.
func TestSlotMoved(t *testing.T) {
	e := start(t, DefaultConfig, nil)
	g := e.join(t, "x")
	w := e.n.Enter(g, "o1")
	old := e.conns(t)
	if len(old) != 1 || old[0].ssub != 1 {
		t.Fatalf("pub/sub connections %+v, want 1 with the channel", old)
	}
	e.b.set(func(b *backend) {
		b.shard = "moved"
		b.places = func(string) (protocol.Placement, error) {
			return protocol.Placement{At: []protocol.Place{{Addr: "moved", Client: e.rc}}, Need: 1}, nil
		}
	})
	e.n.Check(context.Background(), g)
	if m := next(t, w, "slot moved"); m != (protocol.Wake{}) {
		t.Errorf("the waiter got %+v, want the wake-up of a moved channel (no owner, no grant)", m)
	}
	eventually(t, "the channel on a new connection only", func() bool {
		// A connection with no channel left is no longer a pub/sub one.
		cs := e.conns(t)
		return len(cs) == 1 && cs[0].id != old[0].id && cs[0].ssub == 1
	})
	e.b.mu.Lock()
	reloads := e.b.reloads
	e.b.mu.Unlock()
	if reloads == 0 {
		t.Error("the slot map was not reloaded")
	}
	if got := e.publish(t, g.channel, "o1 8 500 1"); got != 1 {
		t.Errorf("SPUBLISH reached %d connections, want 1", got)
	}
	if m := next(t, w, "grant after the move"); m.Owner != "o1" || m.Fence != 8 {
		t.Errorf("the waiter got %+v, want its grant, fence 8", m)
	}
	e.n.Exit(g, w, false, 0)
	e.n.Leave(g)
}
