package dlock_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
)

// TestOverlapChecker: the chaos run's first invariant (checkOverlaps) on
// small histories written by hand. Times are in ms; a section is written
// [fence begin-end release].
func TestOverlapChecker(t *testing.T) {
	t.Parallel()
	ms := int64(1_000_000)
	at := func(kind dlock.Kind, hold string, fence, begin, end int64, release string) section {
		s := section{Kind: kind, Name: "x", Hold: hold, Fence: fence, Begin: begin * ms, End: end * ms, Release: release, Pid: 1, G: int(fence)}
		if hold == holdPermits {
			s.Permits, s.Total = 1, 2
		}
		return s
	}
	mutex := func(fence, begin, end int64, release string) section {
		return at(dlock.KindMutex, holdWrite, fence, begin, end, release)
	}
	read := func(fence, begin, end int64, release string) section {
		return at(dlock.KindRWMutex, holdRead, fence, begin, end, release)
	}
	write := func(fence, begin, end int64, release string) section {
		return at(dlock.KindRWMutex, holdWrite, fence, begin, end, release)
	}
	permit := func(fence, begin, end int64, release string) section { // one of 2 permits
		return at(dlock.KindSemaphore, holdPermits, fence, begin, end, release)
	}
	permits := func(n, total int64, s section) section {
		s.Permits, s.Total = n, total
		return s
	}
	leader := func(fence, begin, end int64, release string) section {
		return at(dlock.KindElection, holdLeader, fence, begin, end, release)
	}
	named := func(name string, s section) section {
		s.Name = name
		return s
	}
	const (
		ok   = releasedNil
		lost = releasedLost
		gone = releasedNotHeld
		err  = releasedOther
	)
	for _, tc := range []struct {
		name    string
		history []section
		want    []string // per violation: the fence granted last, "<-", the earlier fences blamed
	}{
		{"mutex apart", []section{mutex(1, 0, 10, ok), mutex(2, 20, 30, ok)}, nil},
		{"mutex touching", []section{mutex(1, 0, 10, ok), mutex(2, 10, 20, ok)}, nil},
		{"mutex overlap, first said nil", []section{mutex(1, 0, 10, ok), mutex(2, 5, 20, ok)}, []string{"2<-1"}},
		{"mutex overlap, first said lost", []section{mutex(1, 0, 10, lost), mutex(2, 5, 20, ok)}, nil},
		{"mutex overlap, first said not held", []section{mutex(1, 0, 10, gone), mutex(2, 5, 20, ok)}, nil},
		{"mutex overlap, first failed", []section{mutex(1, 0, 10, err), mutex(2, 5, 20, ok)}, nil},
		{"mutex overlap, only the later said lost", []section{mutex(1, 0, 10, ok), mutex(2, 5, 20, lost)}, []string{"2<-1"}},
		{"input order does not matter", []section{mutex(2, 5, 20, ok), mutex(1, 0, 10, ok)}, []string{"2<-1"}},
		{"mutex nested", []section{mutex(1, 0, 30, ok), mutex(2, 10, 20, ok)}, []string{"2<-1"}},
		// The fence, not the order of the Begins, says who was granted
		// first: 2 began first, its acquire's reply having come before 1's.
		{"mutex nested, inner granted first", []section{mutex(2, 0, 30, ok), mutex(1, 10, 20, ok)}, []string{"2<-1"}},
		{"mutex nested, inner granted first and told", []section{mutex(2, 0, 30, ok), mutex(1, 10, 20, lost)}, nil},
		{"mutex three at once", []section{mutex(1, 0, 30, ok), mutex(2, 10, 40, ok), mutex(3, 20, 50, ok)}, []string{"2<-1", "3<-1,2"}},
		{"mutex three at once, two told", []section{mutex(1, 0, 30, lost), mutex(2, 10, 40, lost), mutex(3, 20, 50, ok)}, nil},
		{"different names", []section{mutex(1, 0, 10, ok), named("y", mutex(2, 5, 20, ok))}, nil},
		{"different kinds", []section{mutex(1, 0, 10, ok), leader(2, 5, 20, ok)}, nil},
		{"empty section", []section{mutex(1, 5, 5, ok), mutex(2, 0, 10, ok)}, nil},
		{"fair mutex", []section{at(dlock.KindFairMutex, holdWrite, 1, 0, 10, ok), at(dlock.KindFairMutex, holdWrite, 2, 5, 20, ok)}, []string{"2<-1"}},
		{"leaders overlap", []section{leader(7, 0, 10, ok), leader(9, 5, 20, ok)}, []string{"9<-7"}},
		{"leaders overlap, resign said lost", []section{leader(7, 0, 10, lost), leader(9, 5, 20, ok)}, nil},

		{"readers overlap", []section{read(1, 0, 10, ok), read(2, 5, 20, ok), read(3, 6, 8, ok)}, nil},
		{"writer after a reader", []section{read(1, 0, 10, ok), write(2, 5, 20, ok)}, []string{"2<-1"}},
		{"reader after a writer", []section{write(1, 0, 10, ok), read(2, 5, 20, ok)}, []string{"2<-1"}},
		{"reader after a writer that was told", []section{write(1, 0, 10, lost), read(2, 5, 20, ok)}, nil},
		{"writer nested in readers", []section{read(1, 0, 30, ok), read(2, 2, 30, lost), write(3, 10, 20, ok)}, []string{"3<-1"}},
		{"readers nested in a writer", []section{write(1, 0, 30, ok), read(2, 5, 10, ok), read(3, 8, 20, ok)}, []string{"2<-1", "3<-1"}},
		{"writers touching readers", []section{read(1, 0, 10, ok), write(2, 10, 20, ok), read(3, 20, 30, ok)}, nil},

		{"2 permits, two at once", []section{permit(1, 0, 10, ok), permit(2, 5, 20, ok)}, nil},
		{"2 permits, three at once", []section{permit(1, 0, 30, ok), permit(2, 5, 30, ok), permit(3, 10, 20, ok)}, []string{"3<-1,2"}},
		{"2 permits, three at once, one told", []section{permit(1, 0, 30, ok), permit(2, 5, 30, lost), permit(3, 10, 20, ok)}, nil},
		{"2 permits, three at once, the last told", []section{permit(1, 0, 30, ok), permit(2, 5, 30, ok), permit(3, 10, 20, lost)}, []string{"3<-1,2"}},
		{"2 permits, three in a chain", []section{permit(1, 0, 10, ok), permit(2, 5, 20, ok), permit(3, 10, 30, ok), permit(4, 20, 40, ok)}, nil},
		{"2 permits, a chain touching", []section{permit(1, 0, 10, ok), permit(2, 0, 10, ok), permit(3, 10, 20, ok)}, nil},
		{"2 permits, four at once, one told", []section{permit(1, 0, 40, lost), permit(2, 5, 40, ok), permit(3, 10, 40, ok), permit(4, 15, 40, ok)}, []string{"4<-2,3"}},
		{"2 permits, four at once, two told", []section{permit(1, 0, 40, lost), permit(2, 5, 40, ok), permit(3, 10, 40, lost), permit(4, 15, 40, ok)}, nil},
		{"3 permits, two and two", []section{permits(2, 3, permit(1, 0, 10, ok)), permits(2, 3, permit(2, 5, 20, ok))}, []string{"2<-1"}},
		{"3 permits, two and one", []section{permits(2, 3, permit(1, 0, 10, ok)), permits(1, 3, permit(2, 5, 20, ok))}, nil},
		{"3 permits, two granted after one, one told", []section{permits(1, 3, permit(1, 0, 30, ok)), permits(2, 3, permit(2, 5, 30, ok)), permits(1, 3, permit(3, 10, 20, ok))}, []string{"3<-1,2"}},
		// Fence order again: the third to begin was granted first.
		{"2 permits, granted before it began", []section{permit(2, 0, 30, ok), permit(3, 5, 30, lost), permit(1, 10, 20, ok)}, []string{"3<-1,2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, v := range checkOverlaps(tc.history) {
				var earlier []string
				for _, e := range v.Earlier {
					earlier = append(earlier, fmt.Sprint(e.Fence))
				}
				got = append(got, fmt.Sprintf("%d<-%s", v.Later.Fence, strings.Join(earlier, ",")))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOverlapReport: a violation names both sections: kind, name, fence,
// process, times and what the release returned.
func TestOverlapReport(t *testing.T) {
	t.Parallel()
	a := section{Kind: dlock.KindRWMutex, Name: "chaos", Hold: holdWrite, Fence: 11, Begin: 1_000_000, End: 9_000_000, Release: releasedNil, Pid: 41, G: 2}
	b := section{Kind: dlock.KindRWMutex, Name: "chaos", Hold: holdRead, Fence: 12, Begin: 5_000_000, End: 20_000_000, Release: releasedLost, Err: "dlock: lock lost", Pid: 42, G: 3}
	vs := checkOverlaps([]section{a, b})
	if len(vs) != 1 {
		t.Fatalf("violations %v, want one", vs)
	}
	got := vs[0].String()
	for _, want := range []string{"read hold of RWMutex \"chaos\" with fence 12 by pid 42 goroutine 3", "(15ms), release returned lost (dlock: lock lost)",
		"write hold of RWMutex \"chaos\" with fence 11 by pid 41 goroutine 2", "(8ms), release returned nil"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	p := section{Kind: dlock.KindSemaphore, Name: "s", Hold: holdPermits, Permits: 2, Total: 3, Fence: 1, Begin: 0, End: 10, Release: releasedNil}
	q := p
	q.Fence, q.Begin, q.End = 2, 5, 20
	vs = checkOverlaps([]section{p, q})
	if len(vs) != 1 || !strings.Contains(vs[0].String(), "4 permits of 3 held at once: 2 of 3 permits of Semaphore \"s\" with fence 2") {
		t.Errorf("semaphore report %v", vs)
	}
}
