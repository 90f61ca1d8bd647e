package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

// handoffWindow is the span over which watch reports hand-offs per second.
const handoffWindow = 10 * time.Second

// runWatch follows one lock as it changes hands: in a terminal, a view
// redrawn at every look; otherwise a line at every change.
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlock watch", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	kindS := kindFlag(fs)
	every := fs.Duration("interval", 100*time.Millisecond, "how often to look at the lock")
	plain := fs.Bool("plain", false, "print a line at every change even in a terminal (the default when the output is not one)")
	rest, err := parseFlags(fs, args, "dlock watch [flags] NAME\n\nFollows the lock NAME until interrupted: its holders, its queue and the hand-offs per second, looked at every --interval; with --kind Election, who leads (as dlock leader prints it), the candidates in line and the leader changes. In a terminal the view is redrawn in place; piped, a line is printed at every change. A hand-off is a new holder seen; holders that come and go between two looks are not seen.", stdout)
	if err != nil {
		return err
	}
	name, err := oneName("dlock watch", rest)
	if err != nil {
		return err
	}
	if *every <= 0 {
		return usagef("dlock watch: --interval %v: want more than 0", *every)
	}
	kind, c, closeC, err := cn.openKind("dlock watch", *kindS)
	if err != nil {
		return err
	}
	defer closeC()
	if kind == "" {
		states, err := find(ctx, c, "", name)
		if err != nil {
			return err
		}
		if len(states) > 1 {
			return usagef("dlock watch: %q is a lock of several kinds (%s, %s): say which with --kind", name, states[0].Kind, states[1].Kind)
		}
		kind = dlock.KindMutex
		if len(states) == 1 {
			kind = states[0].Kind
		} else {
			fmt.Fprintf(stderr, "dlock watch: Redis holds nothing of %q under the prefix %q yet; watching it as a Mutex (--kind to choose; the prefix is --prefix, else $%s)\n", name, cn.prefix, prefixEnv)
		}
	}
	w := watcher{out: stdout, tty: !*plain && isTerminal(stdout), every: *every}
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		if kind == dlock.KindElection {
			el, err := readElection(ctx, c, name)
			if ctx.Err() != nil {
				return nil
			}
			w.showElection(el, err)
		} else {
			s, err := c.Inspect(ctx, kind, name)
			if ctx.Err() != nil {
				return nil
			}
			w.show(s, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// watcher draws what watch sees.
type watcher struct {
	out   io.Writer
	tty   bool
	every time.Duration

	started  bool
	last     string           // the last line printed (piped)
	held     map[string]int64 // the holders seen at the last look: owner -> fence
	seen     int              // hand-offs seen
	handoffs []time.Time      // when each hand-off of the last handoffWindow was seen
	failing  bool
}

// show takes one look's result.
func (w *watcher) show(s *dlock.LockState, err error) {
	if w.failed(err) {
		return
	}
	held := make(map[string]int64, len(s.Holders))
	for _, h := range s.Holders {
		held[h.Owner] = h.Fence
	}
	rate := w.count(held)
	if w.tty {
		var b strings.Builder
		fmt.Fprintf(&b, "\x1b[H\x1b[2Jdlock watch %s %q every %v (Ctrl-C to stop)\n", s.Kind, s.Name, w.every)
		fmt.Fprintf(&b, "hand-offs: %d seen, %.1f/s over the last %v\n\n", w.seen, rate, handoffWindow)
		printState(&b, s)
		io.WriteString(w.out, b.String())
		return
	}
	w.line(fmt.Sprintf("holders=%s fence=%s waiters=%d", holdersCell(s), fenceCell(s.Fence), s.Queued), "handoffs", rate)
}

// showElection takes one look's result at an election: who leads, and the
// candidates in line. A new leader seen counts as a hand-off, which the view
// calls a leader change.
func (w *watcher) showElection(el *election, err error) {
	if w.failed(err) {
		return
	}
	held := make(map[string]int64, 1)
	if l := el.Leader; l != nil {
		held[l.Owner] = l.Term
	}
	rate := w.count(held)
	if w.tty {
		var b strings.Builder
		fmt.Fprintf(&b, "\x1b[H\x1b[2Jdlock watch Election %q every %v (Ctrl-C to stop)\n", el.Name, w.every)
		fmt.Fprintf(&b, "leader changes: %d seen, %.1f/s over the last %v\n\n", w.seen, rate, handoffWindow)
		printElection(&b, el)
		io.WriteString(w.out, b.String())
		return
	}
	lead := "leader=none"
	if l := el.Leader; l != nil {
		lead = fmt.Sprintf("leader=%s term=%d value=%q", ownerWord(l.Owner, l.ClientName), l.Term, l.Value)
	}
	w.line(fmt.Sprintf("%s candidates=%d", lead, len(el.Candidates)), "changes", rate)
}

// failed handles a look that failed, if err is not nil, and reports whether
// it did.
func (w *watcher) failed(err error) bool {
	if err == nil {
		w.failing = false
		return false
	}
	err = authHint("Redis", err, loginHint)
	if w.tty {
		fmt.Fprintf(w.out, "\x1b[H\x1b[2Jdlock watch: %v\n(retrying every %v)\n", err, w.every)
	} else if !w.failing {
		fmt.Fprintf(w.out, "%s error: %v\n", time.Now().UTC().Format("15:04:05.000"), err)
	}
	w.failing = true
	return true
}

// count takes the holders of one look (owner -> fence), counts those new
// since the last look as hand-offs, and returns the hand-offs per second
// over the last handoffWindow.
func (w *watcher) count(held map[string]int64) float64 {
	now := time.Now()
	for o := range held {
		if _, was := w.held[o]; w.started && !was {
			w.seen++
			w.handoffs = append(w.handoffs, now)
		}
	}
	w.held, w.started = held, true
	w.handoffs = slices.DeleteFunc(w.handoffs, func(t time.Time) bool { return now.Sub(t) > handoffWindow })
	return float64(len(w.handoffs)) / handoffWindow.Seconds()
}

// line prints, piped, what a look saw if it differs from the last line, with
// the hand-offs counted (as what).
func (w *watcher) line(line, what string, rate float64) {
	if line == w.last {
		return
	}
	w.last = line
	fmt.Fprintf(w.out, "%s %s %s=%d rate=%.1f/s\n", time.Now().UTC().Format("15:04:05.000"), line, what, w.seen, rate)
}
