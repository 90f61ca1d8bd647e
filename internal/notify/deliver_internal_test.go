package notify

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
)

// TestDeliver: a message on a gate's channel wakes the waiter it names, with
// the grant it carries; a grant to an owner not waiting here wakes nobody, a
// "*" wakes every waiter of the gate, and a waiter that exited gets nothing
// more.
func TestDeliver(t *testing.T) {
	e := start(t, DefaultConfig, nil)
	g := e.join(t, "x")
	w1, w2 := e.n.Enter(g, "o1"), e.n.Enter(g, "o2")

	// One connection per Client, in the order sent: by the time o1's grant
	// arrives, the grant to o3 (who does not wait here) was dispatched. Had
	// it been given to w1, w1's one slot would hold it and o1's be dropped.
	if got := e.publish(t, g.channel, "o3 41 500 1700000000000000"); got != 1 {
		t.Fatalf("SPUBLISH reached %d connections, want 1: the notifier's", got)
	}
	e.publish(t, g.channel, "o1 42 500 1700000000000001")
	want := protocol.Wake{Owner: "o1", Fence: 42, Lease: 500 * time.Millisecond, At: 1700000000000001}
	if m := next(t, w1, "grant to o1"); m != want {
		t.Errorf("o1 got %+v, want its grant %+v", m, want)
	}
	none(t, w2, "grants to o3 and o1")

	// A plain wake-up (no grant) to o2: "try again".
	e.publish(t, g.channel, "o2")
	if m := next(t, w2, "wake-up of o2"); m != (protocol.Wake{Owner: "o2"}) {
		t.Errorf("o2 got %+v, want a wake-up without a grant", m)
	}
	none(t, w1, "wake-up of o2")

	e.publish(t, g.channel, "*")
	for _, w := range []*Listener{w1, w2} {
		if m := next(t, w, `"*"`); m != (protocol.Wake{Owner: "*"}) {
			t.Errorf("%s got %+v, want the wake-up of every waiter", w.owner, m)
		}
	}

	e.n.Exit(g, w1, false, 0)
	e.publish(t, g.channel, "o1 43 500 1700000000000002")
	e.publish(t, g.channel, "o2")
	next(t, w2, "wake-up of o2 after o1 exited")
	none(t, w1, "a grant to o1 after it exited")
	e.n.Exit(g, w2, false, 0)
	e.n.Leave(g)
	if n := e.bg.handedOff(); n != 0 {
		t.Errorf("Exits without a registration handed off %d pieces of work, want none", n)
	}
}

// TestSharedConnection: the gates of many locks, joined at once, share one
// pub/sub connection to the server, and each message reaches the waiters of
// its own gate only.
func TestSharedConnection(t *testing.T) {
	e := start(t, DefaultConfig, nil)
	const locks = 20
	gates := make([]*Gate, locks)
	var wg sync.WaitGroup
	errs := make([]error, locks)
	for i := range gates {
		wg.Go(func() {
			k := keys(fmt.Sprint("lock", i))
			gates[i], errs[i] = e.n.Join(t.Context(), k, ttl, k.Channel+clientID)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Join of lock%d: %v", i, err)
		}
	}
	if cs := e.conns(t); len(cs) != 1 || cs[0].ssub != locks {
		t.Fatalf("pub/sub connections %+v, want 1 with %d shard channels", cs, locks)
	}
	ws := make([]*Listener, locks)
	for i, g := range gates {
		ws[i] = e.n.Enter(g, "o")
	}
	// Every waiter is "o": only the channel tells them apart.
	for _, i := range []int{7, 3} {
		e.publish(t, gates[i].channel, fmt.Sprintf("o %d 500 1", 100+i))
		if m := next(t, ws[i], "grant on its channel"); m.Fence != int64(100+i) {
			t.Errorf("lock%d's waiter got %+v, want fence %d", i, m, 100+i)
		}
	}
	for i, w := range ws {
		if i != 7 && i != 3 {
			none(t, w, "grants on the channels of lock7 and lock3")
		}
	}
	chs := e.n.ReadyChannels()
	if len(chs) != locks {
		t.Errorf("%d ready channels, want %d", len(chs), locks)
	}
	for i, g := range gates {
		if !slices.Contains(chs, g.channel) {
			t.Errorf("lock%d's channel not ready", i)
		}
		e.n.Exit(g, ws[i], false, 0)
		e.n.Leave(g)
	}
}
