package main

// The commands for the people on call: ls, inspect, watch, release and
// permits.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// conn is how an admin command reaches Redis: the flags every one of them
// takes, and the environment.
type conn struct {
	redis   string
	master  string
	cluster bool
	prefix  string
	timeout time.Duration
	tls     tlsFlags
}

// tlsFlags are the TLS settings of the connection: a rediss:// URL, or any
// of them with host:port addresses, turns TLS on.
type tlsFlags struct {
	on       bool
	caCert   string // PEM file of the CA that signed the server's certificate
	cert     string // PEM file of the client's certificate (mutual TLS)
	key      string // its key
	insecure bool   // no check of the server's certificate
}

// set reports whether any TLS flag was given.
func (f *tlsFlags) set() bool {
	return f.on || f.caCert != "" || f.cert != "" || f.key != "" || f.insecure
}

// config returns the TLS configuration the flags ask for, on top of base (a
// rediss:// URL's, which names the server), or nil if they ask for none.
func (f *tlsFlags) config(base *tls.Config) (*tls.Config, error) {
	if base == nil && !f.set() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if base != nil {
		cfg = base.Clone()
	}
	if f.caCert != "" {
		pem, err := os.ReadFile(f.caCert)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-cert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca-cert %s: no PEM certificate in it", f.caCert)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.cert != "" && f.key != "":
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case f.cert != "" || f.key != "":
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cfg.InsecureSkipVerify = f.insecure
	return cfg, nil
}

// prefixEnv names the environment variable that sets --prefix when the
// flag is not given, so that people on call set it once for every command.
const prefixEnv = "DLOCK_PREFIX"

// defaultPrefix is --prefix when not given: DLOCK_PREFIX if set and not
// empty, else the library's default.
func defaultPrefix() string {
	if p := os.Getenv(prefixEnv); p != "" {
		return p
	}
	return dlock.DefaultPrefix
}

// flags adds conn's flags to fs.
func (c *conn) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.redis, "redis", defaultRedisURL,
		"a Redis `URL` (redis://, rediss://, unix://), or comma-separated host:port addresses: Sentinels with --master, Cluster nodes with --cluster")
	fs.StringVar(&c.master, "master", "", "the Sentinel master `name`: --redis lists the Sentinels")
	fs.BoolVar(&c.cluster, "cluster", false, "--redis lists nodes of a Redis Cluster")
	fs.StringVar(&c.prefix, "prefix", defaultPrefix(), "the `prefix` of the Clients' keys (their WithPrefix); "+prefixEnv+" sets it for every command")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "how long each request to Redis may take")
	fs.BoolVar(&c.tls.on, "tls", false, "connect with TLS (implied by a rediss:// URL and by the other --tls flags)")
	fs.StringVar(&c.tls.caCert, "tls-ca-cert", "", "a PEM `file` of the CA that signed the server's certificate (a private CA)")
	fs.StringVar(&c.tls.cert, "tls-cert", "", "a PEM `file` of the client's certificate, for a server that asks for one (tls-auth-clients)")
	fs.StringVar(&c.tls.key, "tls-key", "", "a PEM `file` of the client certificate's key")
	fs.BoolVar(&c.tls.insecure, "tls-insecure", false, "do not check the server's certificate (tests only: anyone in between can read and change everything)")
}

// open connects as c says. REDIS_USERNAME and REDIS_PASSWORD log in (an
// ACL user, or the default user's password), overriding a URL's;
// REDIS_SENTINEL_USERNAME and REDIS_SENTINEL_PASSWORD log in to Sentinels.
func (c *conn) open(cmd string) (*dlock.Client, func(), error) {
	var rdb redis.UniversalClient
	user, pass := os.Getenv("REDIS_USERNAME"), os.Getenv("REDIS_PASSWORD")
	if strings.Contains(c.redis, "://") {
		if c.master != "" || c.cluster {
			return nil, nil, usagef("%s: --master and --cluster take host:port addresses, not a URL", cmd)
		}
		opt, err := redis.ParseURL(c.redis)
		if err != nil {
			return nil, nil, usagef("%s: --redis %q: %v", cmd, c.redis, err)
		}
		if user != "" {
			opt.Username = user
		}
		if pass != "" {
			opt.Password = pass
		}
		opt.ReadTimeout, opt.WriteTimeout, opt.DialTimeout = c.timeout, c.timeout, c.timeout
		if opt.TLSConfig, err = c.tls.config(opt.TLSConfig); err != nil {
			return nil, nil, usagef("%s: %v", cmd, err)
		}
		rdb = redis.NewClient(opt)
	} else {
		addrs := strings.Split(c.redis, ",")
		if slices.Contains(addrs, "") {
			return nil, nil, usagef("%s: --redis %q: an empty address", cmd, c.redis)
		}
		if c.master != "" && c.cluster {
			return nil, nil, usagef("%s: --master and --cluster: choose one", cmd)
		}
		tlsConfig, err := c.tls.config(nil)
		if err != nil {
			return nil, nil, usagef("%s: %v", cmd, err)
		}
		rdb = redis.NewUniversalClient(&redis.UniversalOptions{
			TLSConfig: tlsConfig,
			Addrs:     addrs, MasterName: c.master, IsClusterMode: c.cluster,
			Username: user, Password: pass,
			SentinelUsername: os.Getenv("REDIS_SENTINEL_USERNAME"), SentinelPassword: os.Getenv("REDIS_SENTINEL_PASSWORD"),
			ReadTimeout: c.timeout, WriteTimeout: c.timeout, DialTimeout: c.timeout,
		})
	}
	dc, err := dlock.New(rdb, dlock.WithPrefix(c.prefix))
	if err != nil {
		rdb.Close()
		return nil, nil, usagef("%s: %v", cmd, err)
	}
	return dc, func() { dc.Close(); rdb.Close() }, nil
}

// openKind reads a command's --kind flag (kindS) and connects, for the
// commands about one lock.
func (c *conn) openKind(cmd, kindS string) (dlock.Kind, *dlock.Client, func(), error) {
	kind, err := parseKind(cmd, kindS)
	if err != nil {
		return "", nil, nil, err
	}
	dc, closeC, err := c.open(cmd)
	return kind, dc, closeC, err
}

// parseKind reads a --kind flag: "" for any.
func parseKind(cmd, s string) (dlock.Kind, error) {
	if s == "" {
		return "", nil
	}
	for _, k := range dlock.Kinds {
		if strings.EqualFold(s, string(k)) {
			return k, nil
		}
	}
	return "", usagef("%s: --kind %q: want one of %v", cmd, s, dlock.Kinds)
}

// parseFlags parses args into fs, flags before or after the positional
// arguments (flagsFirst), printing its usage (with synopsis) for -h. It
// returns the positional arguments.
func parseFlags(fs *flag.FlagSet, args []string, synopsis string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s\n\nFlags:\n", synopsis)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, flag.ErrHelp
		}
		return nil, usagef("%s: %v (run '%s -h' for its flags)", fs.Name(), err, fs.Name())
	}
	return fs.Args(), nil
}

// flagsFirst returns args with the flags of fs moved before the positional
// arguments, and "--" between them, so that fs.Parse, which stops at the
// first argument that is not a flag, sees every flag, and fs.Args() is the
// positional arguments in their order: people type "dlock inspect order:42
// -json" as often as "dlock inspect -json order:42". A flag is read as
// fs.Parse reads it: "-name" or "--name", with "=value", or else, unless it
// is a bool flag, with the next argument as its value. "--" still ends the
// flags: what follows it is positional, also if it starts with '-'. A flag
// fs does not define is kept as a flag, for fs.Parse to refuse, and so is a
// flag that wants a value and comes last, with no "--" after it, so that
// fs.Parse says it needs one.
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case len(a) < 2 || a[0] != '-':
			pos = append(pos, a)
		default:
			flags = append(flags, a)
			name := strings.TrimPrefix(a[1:], "-")
			if strings.Contains(name, "=") {
				continue
			}
			f := fs.Lookup(name)
			if f == nil || isBoolFlag(f) {
				continue
			}
			if i+1 == len(args) {
				return flags
			}
			i++
			flags = append(flags, args[i])
		}
	}
	return append(append(flags, "--"), pos...)
}

// isBoolFlag reports whether f takes no value, as the flag package tells.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// oneName returns the one NAME of a command about one lock, rest its
// positional arguments after the flags: a usage error if there is not
// exactly one, or it is empty (no lock has the empty name).
func oneName(cmd string, rest []string) (string, error) {
	switch {
	case len(rest) != 1:
		return "", usagef("%s: want one NAME, got %q", cmd, rest)
	case rest[0] == "":
		return "", usagef("%s: empty NAME: no lock has the empty name", cmd)
	}
	return rest[0], nil
}

// kindFlag adds --kind to fs.
func kindFlag(fs *flag.FlagSet) *string {
	return fs.String("kind", "", "the lock's `kind`: Mutex, FairMutex, RWMutex, Semaphore, CountDownLatch, Election or Group (default: every kind that has the name)")
}

// find returns the state of every lock named name, of kind or of any kind
// Redis holds something of. With a kind given, its state is returned even if
// Redis holds nothing of it.
func find(ctx context.Context, c *dlock.Client, kind dlock.Kind, name string) ([]*dlock.LockState, error) {
	kinds := dlock.Kinds
	if kind != "" {
		kinds = []dlock.Kind{kind}
	}
	var out []*dlock.LockState
	for _, k := range kinds {
		s, err := c.Inspect(ctx, k, name)
		if err != nil {
			return nil, err
		}
		if s.Exists() || kind != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// runLs lists the locks whose names match a pattern; if none does, it says
// on stderr where it looked.
func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlock ls", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per lock, one per line (durations in whole milliseconds, in fields named ..._ms)")
	rest, err := parseFlags(fs, args, "dlock ls [flags] [PATTERN]\n\nLists the locks whose names match PATTERN (a Redis glob, default *), one line each: kind, name, holders with their hold counts, the shortest TTL left, waiters, last fence. Uses SCAN, never KEYS.", stdout)
	if err != nil || len(rest) > 1 {
		return firstErr(err, usagef("dlock ls: one PATTERN at most, got %q", rest))
	}
	pattern := "*"
	if len(rest) == 1 {
		pattern = rest[0]
	}
	c, closeC, err := cn.open("dlock ls")
	if err != nil {
		return err
	}
	defer closeC()
	var ids []dlock.LockID
	for id, err := range c.Locks(ctx, pattern) {
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		fmt.Fprintf(stderr, "dlock ls: nothing under the prefix %q matches %q (the prefix is --prefix, else $%s, else %q: it must be the Clients' WithPrefix)\n",
			cn.prefix, pattern, prefixEnv, dlock.DefaultPrefix)
		return nil
	}
	slices.SortFunc(ids, func(a, b dlock.LockID) int {
		return cmpOr(strings.Compare(a.Name, b.Name), strings.Compare(string(a.Kind), string(b.Kind)))
	})
	enc := json.NewEncoder(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "KIND\tNAME\tHOLDERS\tTTL\tWAITERS\tFENCE")
	}
	for _, id := range ids {
		s, err := c.Inspect(ctx, id.Kind, id.Name)
		if err != nil {
			return err
		}
		if *asJSON {
			if err := enc.Encode(toLockJSON(s)); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", s.Kind, quoteName(s.Name), holdersCell(s), ttlCell(s), s.Queued, fenceCell(s.Fence))
	}
	if *asJSON {
		return nil
	}
	return tw.Flush()
}

// firstErr returns a if not nil, else b.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// quoteName quotes a name that would not read as one word.
func quoteName(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == '"' || r > '~' }) {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// holdersCell is the HOLDERS column of ls: each holder, with its hold count
// or permits, a few at most.
func holdersCell(s *dlock.LockState) string {
	if s.Kind == dlock.KindCountDownLatch {
		if s.Count > 0 {
			return fmt.Sprintf("count %d", s.Count)
		}
		return "open"
	}
	if len(s.Holders) == 0 {
		return "-"
	}
	var parts []string
	for i, h := range s.Holders {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("+%d more", len(s.Holders)-3))
			break
		}
		parts = append(parts, holderWord(h))
	}
	cell := strings.Join(parts, ",")
	if s.Kind == dlock.KindSemaphore {
		cell += fmt.Sprintf(" (%d/%d permits)", s.Used, s.Permits)
	}
	return cell
}

// holderWord is one holder: its owner id and what it holds, if more than
// one plain hold.
func holderWord(h dlock.Holder) string {
	who := ownerWord(h.Owner, h.ClientName)
	switch {
	case h.Read:
		return who + "(r)"
	case h.Permits > 0:
		return fmt.Sprintf("%s(%d)", who, h.Permits)
	case h.Holds > 1:
		return fmt.Sprintf("%s(x%d)", who, h.Holds)
	}
	return who
}

// ownerWord is an owner id with its Client's name, if Redis keeps one:
// "id:seq@name".
func ownerWord(owner, name string) string {
	if name == "" {
		return owner
	}
	return owner + "@" + name
}

// ttlCell is the TTL column: the shortest lease left.
func ttlCell(s *dlock.LockState) string {
	if len(s.Holders) == 0 {
		return "-"
	}
	least := s.Holders[0].TTL
	for _, h := range s.Holders[1:] {
		least = min(least, h.TTL)
	}
	return roundDuration(least).String()
}

func fenceCell(f int64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprint(f)
}

// roundDuration rounds d for people: milliseconds under 10s, else tenths.
func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// runInspect prints everything about one lock.
func runInspect(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dlock inspect", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	kindS := kindFlag(fs)
	asJSON := fs.Bool("json", false, "print the lock as one JSON object (one per line if the name has several kinds; durations in whole milliseconds, in fields named ..._ms)")
	rest, err := parseFlags(fs, args, "dlock inspect [flags] NAME\n\nPrints everything Redis holds about the lock NAME: its holders (owner, holds, fence, since when, TTL left), its waiters in the order they will be served, the last fence; a Semaphore's permits, a CountDownLatch's count.", stdout)
	if err != nil {
		return err
	}
	name, err := oneName("dlock inspect", rest)
	if err != nil {
		return err
	}
	kind, c, closeC, err := cn.openKind("dlock inspect", *kindS)
	if err != nil {
		return err
	}
	defer closeC()
	states, err := find(ctx, c, kind, name)
	if err != nil {
		return err
	}
	if len(states) == 0 {
		return fmt.Errorf("dlock inspect: Redis holds nothing of a lock named %q under the prefix %q (the prefix is --prefix, else $%s)", name, cn.prefix, prefixEnv)
	}
	for i, s := range states {
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(toLockJSON(s)); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printState(stdout, s)
	}
	return nil
}

// printState writes s for people to read.
func printState(w io.Writer, s *dlock.LockState) {
	fmt.Fprintf(w, "%s %q at %s\n", s.Kind, s.Name, s.Time.UTC().Format("15:04:05.000"))
	if s.Kind == dlock.KindCountDownLatch {
		if s.Count > 0 {
			fmt.Fprintf(w, "  count    %d: closed\n", s.Count)
		} else {
			fmt.Fprintln(w, "  open (no count)")
		}
		return
	}
	fmt.Fprintf(w, "  fence    %s\n", fenceCell(s.Fence))
	if s.Kind == dlock.KindSemaphore {
		fmt.Fprintf(w, "  permits  %d of %d held\n", s.Used, s.Permits)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(s.Holders) == 0 {
		fmt.Fprintln(w, "  holders  none: free")
	} else {
		fmt.Fprintf(w, "  holders  %d\n", len(s.Holders))
		fmt.Fprintln(tw, "    OWNER\tHOLD\tFENCE\tSINCE\tTTL")
		for _, h := range s.Holders {
			hold := fmt.Sprintf("x%d", h.Holds)
			switch {
			case h.Read:
				hold = "read"
			case h.Permits > 0:
				hold = plural(h.Permits, "permit")
			}
			since := "-"
			if !h.Since.IsZero() {
				since = fmt.Sprintf("%s (%s ago)", h.Since.UTC().Format("15:04:05.000"), roundDuration(s.Time.Sub(h.Since)))
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", ownerWord(h.Owner, h.ClientName), hold, fenceCell(h.Fence), since, roundDuration(h.TTL))
		}
		tw.Flush()
	}
	if s.Queued == 0 {
		fmt.Fprintln(w, "  waiters  none")
		return
	}
	fmt.Fprintf(w, "  waiters  %d queued", s.Queued)
	if len(s.Waiters) < s.Queued {
		fmt.Fprintf(w, " (%d live listed)", len(s.Waiters))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(tw, "    #\tOWNER\tWANTS\tWAITING\tREGISTRATION LEFT")
	for i, wt := range s.Waiters {
		wants := "lock"
		switch {
		case wt.Read:
			wants = "read"
		case wt.Permits > 0:
			wants = plural(wt.Permits, "permit")
		case s.Kind == dlock.KindRWMutex:
			wants = "write"
		}
		waiting := "-"
		if !wt.Since.IsZero() {
			waiting = roundDuration(s.Time.Sub(wt.Since)).String()
		}
		fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\n", i+1, ownerWord(wt.Owner, wt.ClientName), wants, waiting, roundDuration(wt.TTL))
	}
	tw.Flush()
}

// runRelease frees a lock its holders keep: ForceRelease.
func runRelease(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("dlock release", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	kindS := kindFlag(fs)
	force := fs.Bool("force", false, "required: the lock is taken from holders that may still be running")
	yes := fs.Bool("y", false, "do not ask for confirmation")
	owner := fs.String("owner", "", "evict only this owner `id` (as ls and inspect print it), not every holder")
	rest, err := parseFlags(fs, args, "dlock release --force [flags] NAME\n\nTakes the lock NAME from its holders: each hold is released as its holder's release would, so the next waiter gets the lock at once, and the fence moves on, so that a fenced resource that sees the new fence rejects the evicted holders' writes. An evicted holder learns at its next renewal (its Lease's Done closes). Asks for confirmation unless -y; any answer but y exits with status 1, having released nothing.", stdout)
	if err != nil {
		return err
	}
	name, err := oneName("dlock release", rest)
	if err != nil {
		return err
	}
	if !*force {
		return usagef("dlock release: --force is required: it takes the lock from holders that may still be running")
	}
	kind, c, closeC, err := cn.openKind("dlock release", *kindS)
	if err != nil {
		return err
	}
	defer closeC()
	states, err := find(ctx, c, kind, name)
	if err != nil {
		return err
	}
	var held []*dlock.LockState
	for _, s := range states {
		if len(s.Holders) > 0 {
			held = append(held, s)
		}
	}
	switch {
	case len(held) == 0:
		fmt.Fprintf(stdout, "nobody holds %q under the prefix %q: nothing to release\n", name, cn.prefix)
		return nil
	case len(held) > 1:
		return usagef("dlock release: %q is held as %s and %s: say which with --kind", name, held[0].Kind, held[1].Kind)
	}
	s := held[0]
	var owners []string
	for _, h := range s.Holders {
		if *owner == "" || h.Owner == *owner {
			owners = append(owners, h.Owner)
		}
	}
	if len(owners) == 0 {
		return fmt.Errorf("dlock release: %s %q has no holder %q", s.Kind, name, *owner)
	}
	printState(stdout, s)
	if !*yes {
		fmt.Fprintf(stdout, "Take %s %q from %s? [y/N] ", s.Kind, name, strings.Join(owners, ", "))
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("dlock release: read the answer: %w", err)
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return fmt.Errorf("dlock release: not released: the answer was %q, not y", strings.TrimSpace(line))
		}
	}
	ev, err := c.ForceRelease(ctx, s.Kind, name, owners...)
	if err != nil {
		return err
	}
	for _, h := range ev.Evicted {
		fmt.Fprintf(stdout, "evicted %s (fence %s)\n", h.Owner, fenceCell(h.Fence))
	}
	for _, o := range ev.Gone {
		fmt.Fprintf(stdout, "%s held nothing any more\n", o)
	}
	fmt.Fprintf(stdout, "fence moved on to %d: a resource that has seen it, or a later fence, rejects the evicted holders' writes\n", ev.Fence)
	return nil
}

// runPermits prints a Semaphore's total and the permits in use, or, given
// N, sets the total for every process at once (Semaphore.SetPermits).
func runPermits(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("dlock permits", flag.ContinueOnError)
	var cn conn
	cn.flags(fs)
	rest, err := parseFlags(fs, args, "dlock permits [flags] NAME [N]\n\nWithout N, prints the total permits of the Semaphore NAME and how many are in use. With N, sets the total to N for every process that uses NAME, at once (Semaphore.SetPermits): Redis keeps it until the Semaphore's Delete, and it counts instead of the permits each process gave Client.Semaphore. The waiters that fit under N are woken; lowered below the permits in use, the total takes none back, and lets nobody in until fewer than N are in use.", stdout)
	if err != nil {
		return err
	}
	if len(rest) == 0 || len(rest) > 2 {
		return usagef("dlock permits: want NAME and an optional N, got %q", rest)
	}
	name, err := oneName("dlock permits", rest[:1])
	if err != nil {
		return err
	}
	var n int64
	if len(rest) == 2 {
		n, err = strconv.ParseInt(rest[1], 10, 64)
		if err != nil || n < 1 {
			return usagef("dlock permits: N %q: want a whole number of permits, at least 1", rest[1])
		}
	}
	c, closeC, err := cn.open("dlock permits")
	if err != nil {
		return err
	}
	defer closeC()
	before, err := c.Inspect(ctx, dlock.KindSemaphore, name)
	if err != nil {
		return err
	}
	if n == 0 {
		if before.Permits == 0 {
			// An answer, not a failure: as leader's "nobody leads".
			fmt.Fprintf(stdout, "Semaphore %q: no total under the prefix %q (the prefix is --prefix, else $%s): the first process to acquire it will use the permits it gave Client.Semaphore; to set one for every process: dlock permits %s N\n",
				name, cn.prefix, prefixEnv, quoteName(name))
			return nil
		}
		printPermits(stdout, before)
		return nil
	}
	if err := c.Semaphore(name, n).SetPermits(ctx, n); err != nil {
		return fmt.Errorf("dlock permits: %w", err)
	}
	was := "none"
	if before.Permits > 0 {
		was = strconv.FormatInt(before.Permits, 10)
	}
	fmt.Fprintf(stdout, "Semaphore %q: total set to %d for every process (it was %s)\n", name, n, was)
	after, err := c.Inspect(ctx, dlock.KindSemaphore, name)
	if err != nil {
		return err
	}
	printPermits(stdout, after)
	return nil
}

// printPermits writes a Semaphore's total and use.
func printPermits(w io.Writer, s *dlock.LockState) {
	fmt.Fprintf(w, "Semaphore %q: %d of %d permits in use, %s queued\n", s.Name, s.Used, s.Permits, plural(int64(s.Queued), "waiter"))
}

// plural writes n things.
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
