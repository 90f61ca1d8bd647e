package main

// What -json prints: ls and inspect a lock, leader an election. The fields
// are dlock.LockState's, but every duration is a whole number of
// milliseconds in a field whose name ends in _ms, so that a program reading
// it need not know Go's time.Duration.

import (
	"time"

	"github.com/dlock-go/dlock"
)

// lockJSON is one lock as ls -json and inspect -json print it.
type lockJSON struct {
	Kind    dlock.Kind   `json:"kind"`
	Name    string       `json:"name"`
	Time    time.Time    `json:"time"` // the Redis server's clock when it was read
	Holders []holderJSON `json:"holders"`
	Waiters []waiterJSON `json:"waiters"`
	Queued  int          `json:"queued"`
	Fence   int64        `json:"fence"`
	Permits int64        `json:"permits,omitempty"`
	Used    int64        `json:"used,omitempty"`
	Count   int64        `json:"count,omitempty"`
}

// holderJSON is a dlock.Holder.
type holderJSON struct {
	Owner      string    `json:"owner"`
	Client     string    `json:"client"`
	ClientName string    `json:"client_name,omitempty"`
	Read       bool      `json:"read,omitempty"`
	Holds      int       `json:"holds"`
	Permits    int64     `json:"permits,omitempty"`
	Fence      int64     `json:"fence"`
	Since      time.Time `json:"since,omitzero"`
	TTLMs      int64     `json:"ttl_ms"` // what the lease has left unless renewed
}

// waiterJSON is a dlock.Waiter.
type waiterJSON struct {
	Owner      string    `json:"owner"`
	Client     string    `json:"client"`
	ClientName string    `json:"client_name,omitempty"`
	Read       bool      `json:"read,omitempty"`
	Permits    int64     `json:"permits,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	TTLMs      int64     `json:"ttl_ms"` // what its registration has left unless renewed
}

// electionJSON is an election as leader -json prints it.
type electionJSON struct {
	Name       string       `json:"name"`
	Time       time.Time    `json:"time"`
	Leader     *leaderJSON  `json:"leader"` // null when nobody leads
	Candidates []waiterJSON `json:"candidates"`
	Queued     int          `json:"queued"`
}

type leaderJSON struct {
	Owner      string    `json:"owner"`
	ClientName string    `json:"client_name,omitempty"`
	Term       int64     `json:"term"`
	Since      time.Time `json:"since"`
	Value      string    `json:"value"`
	TTLMs      int64     `json:"ttl_ms"`
}

// ms is d in whole milliseconds, rounded down: a TTL is never said to be
// longer than it is.
func ms(d time.Duration) int64 { return d.Milliseconds() }

func toLockJSON(s *dlock.LockState) lockJSON {
	j := lockJSON{
		Kind: s.Kind, Name: s.Name, Time: s.Time, Queued: s.Queued, Fence: s.Fence,
		Permits: s.Permits, Used: s.Used, Count: s.Count,
		Holders: make([]holderJSON, 0, len(s.Holders)), Waiters: toWaitersJSON(s.Waiters),
	}
	for _, h := range s.Holders {
		j.Holders = append(j.Holders, holderJSON{
			Owner: h.Owner, Client: h.Client, ClientName: h.ClientName, Read: h.Read,
			Holds: h.Holds, Permits: h.Permits, Fence: h.Fence, Since: h.Since, TTLMs: ms(h.TTL),
		})
	}
	return j
}

func toWaitersJSON(ws []dlock.Waiter) []waiterJSON {
	out := make([]waiterJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, waiterJSON{
			Owner: w.Owner, Client: w.Client, ClientName: w.ClientName, Read: w.Read,
			Permits: w.Permits, Since: w.Since, TTLMs: ms(w.TTL),
		})
	}
	return out
}

func toElectionJSON(el *election) electionJSON {
	j := electionJSON{Name: el.Name, Time: el.Time, Candidates: toWaitersJSON(el.Candidates), Queued: el.Queued}
	if l := el.Leader; l != nil {
		j.Leader = &leaderJSON{Owner: l.Owner, ClientName: l.ClientName, Term: l.Term, Since: l.Since, Value: l.Value, TTLMs: ms(l.TTL)}
	}
	return j
}
