package notify

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestReconnectHoldsNoLock: while the notifier connects again after a
// half-open connection, to a server that does not answer yet, a wait that
// starts (JoinSubscribed of a ready gate, which needs no server) does not
// wait for that connection: it returns before the reconnection has.
func TestReconnectHoldsNoLock(t *testing.T) {
	var p *faultproxy.Proxy
	e := start(t, Config{MaxIdleGates: 256, HealthCheck: 20 * time.Millisecond, PongWait: time.Second}, func(srv *redistest.Server) string {
		p = faultproxy.Start(t, srv.Addr)
		return p.Addr()
	})
	x := e.join(t, "x")
	e.n.mu.Lock()
	sh := x.shs[0]
	old := sh.ps
	e.n.mu.Unlock()
	accepted := p.Accepted()
	p.BlackholePubSub()
	p.Pause() // the new connection's handshake is held until the test ends
	defer p.Resume()
	eventually(t, "the notifier connecting again", func() bool { return p.Accepted() > accepted })
	done := make(chan bool, 1)
	go func() {
		g := e.n.JoinSubscribed(x.k.Channel, clientID)
		e.n.mu.Lock()
		done <- sh.ps != old
		e.n.mu.Unlock()
		if g != nil {
			e.n.Leave(g)
		}
	}()
	select {
	case waited := <-done:
		if waited {
			t.Error("JoinSubscribed returned only once the reconnection had ended: the notifier's lock is held across its dial and handshake")
		}
	case <-time.After(guard):
		t.Fatal("JoinSubscribed did not return")
	}
	e.n.Leave(x)
}
