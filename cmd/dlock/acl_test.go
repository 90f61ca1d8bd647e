package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// aclDoc is the page whose ACL SETUSER commands TestOnCallACL runs.
const aclDoc = "../../docs/acl.md"

// aclUser makes the user of aclDoc's "ACL SETUSER <user> reset ..." command
// on the server admin talks to, with password for "<password>", and returns
// the command's fields.
func aclUser(t *testing.T, admin *redis.Client, user, password string) []string {
	t.Helper()
	doc, err := os.ReadFile(aclDoc)
	if err != nil {
		t.Fatal(err)
	}
	inBlock := false
	for line := range strings.Lines(string(doc)) {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(strings.TrimSpace(line), "```"):
			inBlock = !inBlock
		case inBlock && len(f) > 3 && f[0] == "ACL" && f[1] == "SETUSER" && f[2] == user && f[3] == "reset":
			args := []any{"acl", "setuser", user}
			for _, r := range f[3:] {
				if r == "><password>" {
					r = ">" + password
				}
				args = append(args, r)
			}
			if err := admin.Do(context.Background(), args...).Err(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			return f
		}
	}
	t.Fatalf("%s has no ACL SETUSER %s reset ... in a code block", aclDoc, user)
	return nil
}

// TestOnCallACL runs every dlock command that only reads (ls, inspect,
// watch, leader, permits NAME) as the on-call user of docs/acl.md, over a
// lock of every kind, some with waiters, made by its dlock user: each
// command succeeds, Redis refuses the user nothing but what a Client may
// be refused (CONFIG GET, and what go-redis sends on connecting), each
// command the user is granted is used, and the commands that write are
// refused.
func TestOnCallACL(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	password, onCallPassword := rand.Text(), rand.Text()
	aclUser(t, admin, "dlock", password)
	cmd := aclUser(t, admin, "dlock-oncall", onCallPassword)

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "dlock", Password: password})
	t.Cleanup(func() { _ = rdb.Close() })
	// Leases and registrations long enough not to be renewed while the
	// commands run, so that the server's counts of commands are theirs.
	c := newLockClient(t, rdb, dlock.WithTTL(time.Minute))
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Mutex("m").Lock(ctx))
	must(c.FairMutex("f").Lock(ctx))
	must(c.RWMutex("rw").RLock(ctx))
	must(c.Semaphore("s", 2).Acquire(ctx, 1))
	must(c.CountDownLatch("l").TrySetCount(ctx, 3))
	must(c.Election("e").Campaign(ctx, "host-a"))
	// A waiter of each kind that queues: a Semaphore's and an RWMutex's
	// are read apart from their holders (HEXISTS). The cancel ends them.
	waiters := make(chan error, 4)
	for _, wait := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.FairMutex("f").Lock(ctx); return err },
		func(ctx context.Context) error { _, err := c.RWMutex("rw").Lock(ctx); return err },
		func(ctx context.Context) error { _, err := c.Semaphore("s", 2).Acquire(ctx, 2); return err },
		func(ctx context.Context) error { _, err := c.Election("e").Campaign(ctx, "host-b"); return err },
	} {
		go func() { waiters <- wait(lctx) }()
	}
	defer func() {
		cancel()
		for range 4 {
			<-waiters
		}
	}()
	for _, queue := range []string{"fair:{f}", "rw:{rw}", "sem:{s}", "election:{e}"} {
		for deadline := time.Now().Add(5 * time.Second); admin.ZCard(ctx, dlock.DefaultPrefix+queue+":waiters").Val() == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("nobody in line at %s after 5s", queue)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ACLLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	t.Setenv("REDIS_USERNAME", "dlock-oncall")
	t.Setenv("REDIS_PASSWORD", onCallPassword)
	t.Setenv(prefixEnv, "")
	flags := []string{"--redis", "redis://" + srv.Addr}
	for _, tc := range []struct {
		args []string
		want string // in the output
	}{
		{[]string{"ls"}, "Election"},
		{[]string{"ls", "--json"}, `"name":"rw"`},
		{[]string{"inspect", "m"}, "Mutex"},
		{[]string{"inspect", "--kind", "FairMutex", "f"}, "FairMutex"},
		{[]string{"inspect", "--kind", "RWMutex", "rw"}, "RWMutex"},
		{[]string{"inspect", "--kind", "Semaphore", "s"}, "Semaphore"},
		{[]string{"inspect", "--kind", "CountDownLatch", "l"}, "CountDownLatch"},
		{[]string{"inspect", "--json", "e"}, `"kind":"Election"`},
		{[]string{"leader", "e"}, "host-a"},
		{[]string{"leader", "--json", "e"}, `"value":"host-a"`},
		{[]string{"permits", "s"}, "1 of 2 permits in use"},
		{[]string{"watch", "--plain", "--interval", "20ms", "rw"}, "waiters=1"},
		{[]string{"watch", "--plain", "--interval", "20ms", "--kind", "Election", "e"}, "host-a"},
	} {
		args := append([]string{tc.args[0]}, append(slices.Clone(flags), tc.args[1:]...)...)
		rctx, stop := context.WithTimeout(ctx, 5*time.Second)
		if tc.args[0] == "watch" {
			// watch runs until interrupted: a few looks.
			rctx, stop = context.WithTimeout(ctx, time.Second)
		}
		var out, errOut bytes.Buffer
		err := run(rctx, args, strings.NewReader(""), &out, &errOut)
		stop()
		// watch prints a look that failed, and goes on.
		if err != nil || !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), " error: ") {
			t.Errorf("dlock %s: %v, want %q in the output:\n%s%s", strings.Join(args, " "), err, tc.want, out.String(), errOut.String())
		}
	}

	entries, err := admin.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Username == "dlock-oncall" && !slices.Contains([]string{"config|get", "client|setinfo", "client|maint_notifications"}, e.Object) {
			t.Errorf("refused dlock-oncall: %s %q (%s)", e.Reason, e.Object, e.Context)
		}
	}
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if ok {
			n, _ := strconv.Atoi(strings.Split(rest, ",")[0])
			used[name] += n
		}
	}
	for _, r := range cmd[3:] {
		if name, ok := strings.CutPrefix(r, "+"); ok && used[name] == 0 {
			t.Errorf("%s grants the on-call user %s, which no command used", aclDoc, r)
		}
	}

	// What writes is refused.
	for _, args := range [][]string{
		{"permits", "s", "3"},
		{"release", "--force", "-y", "m"},
	} {
		args = append([]string{args[0]}, append(slices.Clone(flags), args[1:]...)...)
		var out, errOut bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, &errOut)
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission") &&
			!strings.Contains(err.Error(), "can't run") {
			t.Errorf("dlock %s as the on-call user: %v, want a refusal", strings.Join(args, " "), err)
		}
	}
}
