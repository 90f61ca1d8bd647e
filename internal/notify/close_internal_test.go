package notify

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
	"go.uber.org/goleak"
)

// TestUnregister: a waiter that gives up while registered in Redis has its
// registration removed by a release in leave mode, naming the owner, the
// lock's TTL and the deadline of its acquire in doubt, sent through the work
// handed off to the Client (which Close waits for), not on the caller's
// goroutine; one that never registered sends nothing.
func TestUnregister(t *testing.T) {
	e := start(t, DefaultConfig, nil)
	g := e.join(t, "x")
	w1, w2 := e.n.Enter(g, "o1"), e.n.Enter(g, "o2")
	e.n.Exit(g, w2, false, 0)
	const doubt = 1700000000123
	e.n.Exit(g, w1, true, doubt)
	e.n.Leave(g)
	e.bg.wg.Wait()

	if n := e.bg.handedOff(); n != 1 {
		t.Errorf("%d pieces of work handed off, want 1: the release of o1's registration", n)
	}
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	want := release{"x", protocol.ReleaseArgs{Owner: "o1", Fence: protocol.NoFence, Mode: protocol.ReleaseLeave, TTL: ttl, Void: doubt}}
	if len(e.b.releases) != 1 || e.b.releases[0] != want {
		t.Errorf("releases %+v, want %+v", e.b.releases, want)
	}
}

// TestClose: Close stops every goroutine the notifier started (the receive
// loops of three shards, one a RedLock member's, two of them riding out a
// lost connection, and a resubscription that keeps failing), after which
// Join fails with ErrClosed.
func TestClose(t *testing.T) {
	e := start(t, DefaultConfig, nil)
	ignore := goleak.IgnoreCurrent() // the server's, and the test's client
	x := e.join(t, "x")
	wx := e.n.Enter(x, "o1")
	e.b.set(func(b *backend) {
		b.places = func(string) (protocol.Placement, error) {
			return protocol.Placement{At: []protocol.Place{{Addr: "0/", Client: e.rc}}, Need: 1, Apart: true}, nil
		}
	})
	y := e.join(t, "y")
	e.b.set(func(b *backend) {
		b.places = func(string) (protocol.Placement, error) {
			return protocol.Placement{At: []protocol.Place{{Addr: "other", Client: e.rc}}, Need: 1}, nil
		}
	})
	z := e.join(t, "z")
	wz := e.n.Enter(z, "o3")
	if n := len(e.conns(t)); n != 3 {
		t.Fatalf("%d pub/sub connections, want 3", n)
	}

	// x's channel moved, and the backend cannot place it: its
	// resubscription goes on trying until Close.
	e.b.set(func(b *backend) {
		b.shard = "moved"
		b.places = func(string) (protocol.Placement, error) { return protocol.Placement{}, errors.New("no route") }
	})
	e.n.Check(context.Background(), x)
	next(t, wx, "x's channel moved")
	// The connections of y and z are lost: their loops wait before they
	// read again.
	if err := e.admin.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	next(t, wz, "z's connection lost")

	e.n.Leave(y)
	closed := make(chan struct{})
	go func() {
		e.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(guard):
		t.Fatal("Close did not return")
	}
	if _, err := e.n.Join(context.Background(), keys("w"), ttl, keys("w").Channel+clientID); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("Join after Close: %v, want ErrClosed", err)
	}
	if e.n.JoinSubscribed(keys("z").Channel, clientID) != nil {
		t.Error("JoinSubscribed after Close found a gate")
	}
	if err := e.rdb.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, ignore)
}
