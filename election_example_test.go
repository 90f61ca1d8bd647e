package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A leader hands its term to the resource with each write, and the resource
// refuses a term below the highest it has seen: a leader that was replaced
// while it could not tell (here the people on call took its lease with
// ForceRelease; a process paused past its lease is the same) is refused.
func ExampleLeadership_Term() {
	c, other := exampleClient(), exampleClient()
	defer c.Close()
	defer other.Close()
	store := exampleRedis() // the resource
	ctx := context.Background()

	// KEYS[1]: the record; ARGV[1]: the term; ARGV[2]: the value.
	fencedSet := redis.NewScript(`
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'term') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'term', ARGV[1], 'value', ARGV[2])
return 1`)
	write := func(ld *dlock.Leadership) {
		ok, err := fencedSet.Run(ctx, store, []string{"example:report"}, ld.Term(), ld.Value()).Int()
		switch {
		case err != nil:
			log.Fatal(err)
		case ok == 0:
			fmt.Println(ld.Value() + ": refused, a later term has written")
		default:
			fmt.Println(ld.Value() + ": written")
		}
	}

	el := c.Election("example-report")
	old, err := el.Campaign(ctx, "replica-1")
	if err != nil {
		log.Fatal(err)
	}
	write(old)
	if _, err := c.ForceRelease(ctx, dlock.KindElection, "example-report"); err != nil {
		log.Fatal(err)
	}
	ld, err := other.Election("example-report").Campaign(ctx, "replica-2")
	if err != nil {
		log.Fatal(err)
	}
	write(ld)
	write(old) // it has not learnt yet that it no longer leads
	if l, err := el.Leader(ctx); err == nil {
		fmt.Println("leader:", l.Value)
	}
	if err := ld.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := el.Leader(ctx); errors.Is(err, dlock.ErrNoLeader) {
		fmt.Println("nobody leads")
	}
	// Output:
	// replica-1: written
	// replica-2: written
	// replica-1: refused, a later term has written
	// leader: replica-2
	// nobody leads
}

// TestElectionDocProgram: docs/election.md shows examples/election/main.go,
// which the build compiles, as it is.
func TestElectionDocProgram(t *testing.T) {
	doc, err := os.ReadFile("docs/election.md")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("examples/election/main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```go\n"+string(prog)+"```\n") {
		t.Error("docs/election.md does not show examples/election/main.go as it is, in a go block")
	}
}
