// Package stock sells a flash sale's stock from Redis: one script checks
// that enough is left and that the user has not ordered in this sale,
// deducts, remembers the user and appends the order intent to a Redis
// Stream, in one step, so that no request oversells and no user orders twice,
// however many processes sell at once. A consumer of the stream (its
// consumer group is made with the sale) turns the intents into orders in a
// database; an order that finally fails is given back.
//
// Every key of a sale shares one hash tag, so a sale works on Redis Cluster.
// Every request is safe to run twice (go-redis retries after a lost reply):
// a Buy's order id is made before the script runs and sent with it, so a
// retry answers the same outcome with the same order id and deducts once.
package stock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/redis/go-redis/v9"
)

// Defaults and limits.
const (
	// DefaultPrefix starts every key of a sale unless WithPrefix says
	// otherwise.
	DefaultPrefix = "dlock:sale:"
	// OrdersGroup is the consumer group Create makes on a sale's stream.
	OrdersGroup = "orders"
	// MaxIDLen is the longest sale or user id accepted, in bytes.
	MaxIDLen = 256
)

var (
	//go:embed create.lua
	createLua string
	//go:embed buy.lua
	buyLua string
	//go:embed giveback.lua
	giveBackLua string

	createScript   = redis.NewScript(createLua)
	buyScript      = redis.NewScript(buyLua)
	giveBackScript = redis.NewScript(giveBackLua)
)

// ErrNoSuchSale is what Left returns for a sale that was never created, or
// is over (its TTL ran out, or it was deleted).
var ErrNoSuchSale = errors.New("stock: no such sale")

// Sales sells the stock of sales on one Redis. It is safe for concurrent use.
type Sales struct {
	rdb    redis.UniversalClient
	ids    *idgen.Generator
	prefix string
}

// Option configures Sales.
type Option func(*Sales) error

// WithPrefix sets the text that starts every key of a sale. It must not
// contain '{' or '}'. Default: DefaultPrefix ("dlock:sale:").
func WithPrefix(prefix string) Option {
	return func(s *Sales) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("stock: WithPrefix(%q): a prefix must not contain '{' or '}'", prefix)
		}
		s.prefix = prefix
		return nil
	}
}

// New returns Sales on rdb, taking order ids from ids. It does not contact
// Redis.
func New(rdb redis.UniversalClient, ids *idgen.Generator, opts ...Option) (*Sales, error) {
	switch {
	case rdb == nil:
		return nil, errors.New("stock: New: nil Redis client")
	case ids == nil:
		return nil, errors.New("stock: New: nil id generator")
	}
	s := &Sales{rdb: rdb, ids: ids, prefix: DefaultPrefix}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("stock: New: nil Option")
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Outcome is what a Buy came to.
type Outcome int

const (
	// Ordered: the items were deducted and the order intent appended to the
	// sale's stream.
	Ordered Outcome = iota + 1
	// AlreadyOrdered: the user has an order in this sale; nothing changed.
	AlreadyOrdered
	// SoldOut: fewer items are left than were asked for; nothing changed.
	SoldOut
	// NoSuchSale: the sale was never created, or is over.
	NoSuchSale
)

func (o Outcome) String() string {
	switch o {
	case Ordered:
		return "ordered"
	case AlreadyOrdered:
		return "already ordered"
	case SoldOut:
		return "sold out"
	case NoSuchSale:
		return "no such sale"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is the answer to a Buy.
type Result struct {
	Outcome Outcome
	// OrderID is the new order's id (Ordered), or the user's existing
	// order's (AlreadyOrdered).
	OrderID int64
	// Left is how many items are left after the request (all but
	// NoSuchSale).
	Left int64
}

// keys of sale: stock, buyers, given back, orders.
func (s *Sales) keys(sale string) []string {
	tag := s.prefix + "{" + sale + "}"
	return []string{tag + ":stock", tag + ":buyers", tag + ":given", tag + ":orders"}
}

// Stream returns the key of sale's stream of order intents. Each entry has
// the fields "order" (the order id), "user" and "n".
func (s *Sales) Stream(sale string) string { return s.keys(sale)[3] }

// checkID rejects an id that is empty, too long or has a brace (which
// delimits the hash tag).
func checkID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("stock: empty %s id", what)
	case len(id) > MaxIDLen:
		return fmt.Errorf("stock: %s id of %d bytes, at most %d", what, len(id), MaxIDLen)
	case strings.ContainsAny(id, "{}"):
		return fmt.Errorf("stock: %s id %q has a brace", what, id)
	}
	return nil
}

// Create creates sale with stock items, living ttl (its keys then expire;
// make it outlast the sale and the processing of its orders), and its
// stream's consumer group OrdersGroup. It reports whether this call created
// it: false if the sale exists, which is left as it was.
func (s *Sales) Create(ctx context.Context, sale string, stock int64, ttl time.Duration) (bool, error) {
	switch err := checkID("sale", sale); {
	case err != nil:
		return false, err
	case stock < 0:
		return false, fmt.Errorf("stock: create %q with %d items: want 0 or more", sale, stock)
	case ttl < time.Millisecond:
		return false, fmt.Errorf("stock: create %q with TTL %v: want at least 1ms", sale, ttl)
	}
	req, err := s.ids.Next(ctx)
	if err != nil {
		return false, fmt.Errorf("stock: create %q: %w", sale, err)
	}
	v, err := createScript.Run(ctx, s.rdb, s.keys(sale), stock, ttl.Milliseconds(), OrdersGroup, req).Int64()
	if err != nil {
		return false, fmt.Errorf("stock: create %q: %w", sale, err)
	}
	return v == 1, nil
}

// Buy orders n items of sale for user: see Outcome. The order id is taken
// from the id generator first (one is used up even if nothing is ordered).
func (s *Sales) Buy(ctx context.Context, sale, user string, n int64) (Result, error) {
	if err := checkID("sale", sale); err != nil {
		return Result{}, err
	}
	if err := checkID("user", user); err != nil {
		return Result{}, err
	}
	if n < 1 {
		return Result{}, fmt.Errorf("stock: buy %d of %q: want at least 1", n, sale)
	}
	id, err := s.ids.Next(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("stock: buy %d of %q for %q: %w", n, sale, user, err)
	}
	k := s.keys(sale)
	v, err := buyScript.Run(ctx, s.rdb, []string{k[0], k[1], k[3]}, user, n, id).Int64Slice()
	switch {
	case err != nil:
		return Result{}, fmt.Errorf("stock: buy %d of %q for %q: %w", n, sale, user, err)
	case len(v) != 3:
		return Result{}, fmt.Errorf("stock: buy %d of %q for %q: unexpected reply %v", n, sale, user, v)
	}
	r := Result{OrderID: v[1], Left: v[2]}
	switch v[0] {
	case 1:
		r.Outcome = Ordered
	case 2:
		r.Outcome = AlreadyOrdered
	case 0:
		r.Outcome = SoldOut
	case -1:
		r.Outcome = NoSuchSale
	default:
		return Result{}, fmt.Errorf("stock: buy %d of %q for %q: unexpected reply %v", n, sale, user, v)
	}
	return r, nil
}

// GiveBack returns the items of user's order orderID to sale, for an order
// that finally failed, and forgets the user's order so that the user may
// order again. It reports whether the order was given back (also when a
// retry finds it given back already); false if the user has no such order.
// A sale that is over gives an error matching ErrNoSuchSale.
func (s *Sales) GiveBack(ctx context.Context, sale, user string, orderID int64) (bool, error) {
	if err := checkID("sale", sale); err != nil {
		return false, err
	}
	if err := checkID("user", user); err != nil {
		return false, err
	}
	k := s.keys(sale)
	v, err := giveBackScript.Run(ctx, s.rdb, []string{k[0], k[1], k[2]}, user, orderID).Int64()
	switch {
	case err != nil:
		return false, fmt.Errorf("stock: give back order %d of %q: %w", orderID, sale, err)
	case v == -1:
		return false, fmt.Errorf("stock: give back order %d of %q: %w", orderID, sale, ErrNoSuchSale)
	}
	return v == 1, nil
}

// Left returns how many items of sale are left.
func (s *Sales) Left(ctx context.Context, sale string) (int64, error) {
	if err := checkID("sale", sale); err != nil {
		return 0, err
	}
	n, err := s.rdb.Get(ctx, s.keys(sale)[0]).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, fmt.Errorf("stock: %q: %w", sale, ErrNoSuchSale)
	case err != nil:
		return 0, fmt.Errorf("stock: read what is left of %q: %w", sale, err)
	}
	return n, nil
}

// Delete ends sale at once: its keys, its stream included, are removed.
func (s *Sales) Delete(ctx context.Context, sale string) error {
	if err := checkID("sale", sale); err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, s.keys(sale)...).Err(); err != nil { // one slot: one DEL, on a Cluster too
		return fmt.Errorf("stock: delete %q: %w", sale, err)
	}
	return nil
}
