package notify

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestLeaveUnsubscribes: a gate stays subscribed while anyone has it
// joined; the last Leave, with no idle gates kept, lets the channel go on
// the server and forgets the gate.
func TestLeaveUnsubscribes(t *testing.T) {
	e := start(t, Config{MaxIdleGates: 0}, nil)
	g1, g2 := e.join(t, "x"), e.join(t, "x")
	if g1 != g2 {
		t.Fatal("two joins of one channel got two gates")
	}
	w := e.n.Enter(g2, "o2")
	e.n.Leave(g1)
	e.publish(t, g2.channel, "o2")
	if m := next(t, w, "after the first of two joins left"); m.Owner != "o2" {
		t.Errorf("o2 got %+v, want its wake-up", m)
	}
	e.n.Exit(g2, w, false, 0)
	e.n.Leave(g2)
	eventually(t, "channel let go on the server", func() bool { return e.subscribers(t, g2.channel) == 0 })
	if chs := e.n.channels(); len(chs) != 0 {
		t.Errorf("gates %q kept after the last Leave, want none", chs)
	}
	if e.n.JoinSubscribed(keys("x").Channel, clientID) != nil {
		t.Error("JoinSubscribed found the gate let go")
	}
}

// TestIdleGates: a gate nobody waits on stays subscribed, and is found again
// without a new subscription, until MaxIdleGates newer ones are idle; then
// the oldest is let go.
func TestIdleGates(t *testing.T) {
	e := start(t, Config{MaxIdleGates: 1}, nil)
	a, b := e.join(t, "a"), e.join(t, "b")
	e.n.Leave(a)
	if g := e.n.JoinSubscribed(keys("a").Channel, clientID); g != a {
		t.Fatalf("JoinSubscribed of an idle gate: %p, want %p", g, a)
	}
	e.n.Leave(a)
	e.n.Leave(b) // two idle, one too many: a goes
	eventually(t, "the oldest idle channel let go", func() bool { return e.subscribers(t, a.channel) == 0 })
	// Had b been let go too, it would have been in the same SUNSUBSCRIBE.
	if got := e.subscribers(t, b.channel); got != 1 {
		t.Errorf("the newest idle channel subscribed on %d connections, want 1", got)
	}
	if e.n.JoinSubscribed(keys("a").Channel, clientID) != nil {
		t.Error("JoinSubscribed found the gate let go")
	}
	g := e.n.JoinSubscribed(keys("b").Channel, clientID)
	if g != b {
		t.Fatalf("JoinSubscribed of the idle gate kept: %p, want %p", g, b)
	}
	e.n.Leave(g)
}

// TestJoinGivesUp: a Join whose context ends before Redis confirmed the
// subscription returns the context's error and leaves the gate, which is let
// go once the subscription it sent lands.
func TestJoinGivesUp(t *testing.T) {
	var p *faultproxy.Proxy
	e := start(t, Config{MaxIdleGates: 0}, func(srv *redistest.Server) string {
		p = faultproxy.Start(t, srv.Addr)
		return p.Addr()
	})
	held := p.Inject(faultproxy.Rule{Match: faultproxy.CommandIs("SSUBSCRIBE"), Fault: faultproxy.HoldRequest})
	ctx, cancel := context.WithCancel(context.Background())
	k := keys("x")
	joined := make(chan error, 1)
	go func() {
		_, err := e.n.Join(ctx, k, ttl, k.Channel+clientID)
		joined <- err
	}()
	await(t, held.Hit(), "the SSUBSCRIBE held")
	cancel()
	select {
	case err := <-joined:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Join whose context ended: %v, want context.Canceled", err)
		}
	case <-time.After(guard):
		t.Fatal("Join did not return when its context ended")
	}
	held.Release()
	await(t, held.Delivered(), "the SSUBSCRIBE answered")
	eventually(t, "channel let go on the server", func() bool { return e.subscribers(t, k.Channel+clientID) == 0 })
	if chs := e.n.channels(); len(chs) != 0 {
		t.Errorf("gates %q kept, want none", chs)
	}
}

// TestJoinPlacementFails: when the backend cannot place the channel (Places
// fails, or a RedLock has too few members reachable to confirm it), Join
// returns that error, keeps no gate, and the next Join tries again.
func TestJoinPlacementFails(t *testing.T) {
	errDown := errors.New("cluster down")
	errShort := errors.New("1 of 3 nodes reachable, a majority is 2")
	for _, tc := range []struct {
		name  string
		place func(e *env) (protocol.Placement, error)
		want  error
	}{{
		name:  "Places fails",
		place: func(*env) (protocol.Placement, error) { return protocol.Placement{}, errDown },
		want:  errDown,
	}, {
		name: "no member reachable",
		place: func(*env) (protocol.Placement, error) {
			return protocol.Placement{Need: 2, Apart: true, Short: errShort}, nil
		},
		want: errShort,
	}, {
		name: "too few members reachable",
		place: func(e *env) (protocol.Placement, error) {
			return protocol.Placement{At: []protocol.Place{{Addr: "0/", Client: e.rc}}, Need: 2, Apart: true, Short: errShort}, nil
		},
		want: errShort,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, DefaultConfig, nil)
			e.b.set(func(b *backend) {
				b.places = func(string) (protocol.Placement, error) { return tc.place(e) }
			})
			k := keys("x")
			ctx, cancel := context.WithTimeout(context.Background(), guard) // against a hang only
			defer cancel()
			g, err := e.n.Join(ctx, k, ttl, k.Channel+clientID)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Join: %v, want %v", err, tc.want)
			}
			if g != nil {
				t.Errorf("Join returned a gate with its error")
			}
			if chs := e.n.channels(); len(chs) != 0 {
				t.Errorf("gates %q kept after a failed Join, want none", chs)
			}
			e.b.set(func(b *backend) { b.places = nil })
			g = e.join(t, "x")
			if !slices.Contains(e.n.ReadyChannels(), g.channel) {
				t.Error("channel not ready after a Join that succeeded")
			}
			e.n.Leave(g)
		})
	}
}
