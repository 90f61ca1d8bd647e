package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
)

// election is an election as leader prints it (toElectionJSON for -json).
type election struct {
	Name string
	Time time.Time // the Redis server's clock when it was read
	// Leader is nil when nobody leads.
	Leader *leader
	// Candidates are the live candidates in line, first to lead first (at
	// most dlock.InspectLimit). Queued counts the entries of the line as
	// LockState.Queued does: lapsed registrations no request has dropped yet
	// included, and the leader's own while it leads, if a Resign or an
	// ended term handed it the lease (it keeps its place, as a FairMutex's
	// grantee does).
	Candidates []dlock.Waiter
	Queued     int
}

type leader struct {
	Owner      string
	ClientName string // as dlock.Holder's
	Term       int64
	Since      time.Time
	Value      string
	TTL        time.Duration // what its lease has left unless renewed
}

// runLeader prints who leads an election.
func runLeader(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dlock leader", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	asJSON := fs.Bool("json", false, "print the election as one JSON object (durations in whole milliseconds, in fields named ..._ms)")
	rest, err := parseFlags(fs, args, "dlock leader [flags] NAME\n\nPrints who leads the election NAME (dlock.Election): the leader's owner id, term, since when, value and TTL left; and the candidates in line, in the order they will lead.", stdout)
	if err != nil || len(rest) != 1 {
		return firstErr(err, usagef("dlock leader: want one NAME, got %q", rest))
	}
	c, closeC, err := cn.open("dlock leader")
	if err != nil {
		return err
	}
	defer closeC()
	el, err := readElection(ctx, c, rest[0])
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(toElectionJSON(el))
	}
	printElection(stdout, el)
	return nil
}

// readElection reads the election name: its lease and line (Inspect) and
// its leader record (Election.Leader), two requests, read again (up to 3
// times) while they disagree because the leader changed in between.
func readElection(ctx context.Context, c *dlock.Client, name string) (*election, error) {
	var el *election
	for range 3 {
		s, err := c.Inspect(ctx, dlock.KindElection, name)
		if err != nil {
			return nil, err
		}
		l, err := c.Election(name).Leader(ctx)
		if err != nil && !errors.Is(err, dlock.ErrNoLeader) {
			return nil, err
		}
		el = &election{Name: name, Time: s.Time, Candidates: s.Waiters, Queued: s.Queued}
		if len(s.Holders) == 1 && err == nil {
			h := s.Holders[0]
			el.Leader = &leader{Owner: h.Owner, ClientName: h.ClientName, Term: l.Term, Since: l.Since, Value: l.Value, TTL: h.TTL}
			if h.Fence == l.Term {
				break
			}
		} else if len(s.Holders) == 0 && err != nil {
			break
		}
	}
	return el, nil
}

// printElection writes el for people to read.
func printElection(w io.Writer, el *election) {
	fmt.Fprintf(w, "Election %q at %s\n", el.Name, el.Time.UTC().Format("15:04:05.000"))
	if l := el.Leader; l == nil {
		fmt.Fprintln(w, "  leader      none: nobody leads")
	} else {
		fmt.Fprintf(w, "  leader      %s\n", ownerWord(l.Owner, l.ClientName))
		fmt.Fprintf(w, "  term        %d\n", l.Term)
		fmt.Fprintf(w, "  since       %s (%s ago)\n", l.Since.UTC().Format("15:04:05.000"), roundDuration(el.Time.Sub(l.Since)))
		fmt.Fprintf(w, "  value       %q\n", l.Value)
		fmt.Fprintf(w, "  TTL         %s\n", roundDuration(l.TTL))
	}
	if len(el.Candidates) == 0 {
		fmt.Fprintln(w, "  candidates  none in line")
		return
	}
	if len(el.Candidates) == dlock.InspectLimit && el.Queued > len(el.Candidates) {
		fmt.Fprintf(w, "  candidates  %d listed, up to %d in line\n", len(el.Candidates), el.Queued)
	} else {
		fmt.Fprintf(w, "  candidates  %d in line\n", len(el.Candidates))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "    #\tOWNER\tWAITING\tREGISTRATION LEFT")
	for i, c := range el.Candidates {
		waiting := "-"
		if !c.Since.IsZero() {
			waiting = roundDuration(el.Time.Sub(c.Since)).String()
		}
		fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\n", i+1, ownerWord(c.Owner, c.ClientName), waiting, roundDuration(c.TTL))
	}
	tw.Flush()
}
