package notify

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestRejoinAfterLetGo: a channel let go (its last waiter left) and joined
// again before the server's confirmation of the SUNSUBSCRIBE was read stays
// subscribed: that confirmation is the notifier's own doing, not the server
// dropping the channel because its slot moved, so nothing is subscribed
// again and the slot map is not reloaded.
func TestRejoinAfterLetGo(t *testing.T) {
	var p *faultproxy.Proxy
	e := start(t, Config{MaxIdleGates: 0}, func(srv *redistest.Server) string {
		p = faultproxy.Start(t, srv.Addr)
		return p.Addr()
	})
	k := keys("x")
	e.n.Leave(e.join(t, "x")) // SUNSUBSCRIBE written
	p.Pause()                 // its confirmation is held until Resume
	joined := make(chan error, 1)
	go func() {
		g, err := e.n.Join(context.Background(), k, ttl, k.Channel+clientID)
		if err == nil {
			e.n.Leave(g)
		}
		joined <- err
	}()
	eventually(t, "the new gate placed", func() bool {
		e.n.mu.Lock()
		defer e.n.mu.Unlock()
		g := e.n.gates[k.Channel+clientID]
		return g != nil && len(g.shs) == 1
	})
	p.Resume()
	select {
	case err := <-joined:
		if err != nil {
			t.Fatalf("Join: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Join did not return")
	}
	e.close() // waits for any resubscription the confirmation started
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	if e.b.reloads != 0 {
		t.Errorf("the confirmation of the notifier's own SUNSUBSCRIBE, read after a new Join, was taken for the server dropping the channel: %d reloads and resubscriptions (meanwhile the channel was unsubscribed)", e.b.reloads)
	}
}
