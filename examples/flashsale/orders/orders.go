// Package orders turns a sale's stream of order intents (package stock) into
// rows in PostgreSQL: a consumer group whose consumers may die at any point
// without losing or doubling an order.
//
// Each entry is written in one transaction: the order row (its id is the
// primary key, and UNIQUE (sale, user_id) is the last guard against a second
// order of a user) and the sale's stock, lowered WHERE stock >= n. The entry
// is acknowledged (XACK) only after the commit, so a consumer killed before
// it leaves the entry pending, and another consumer claims it (XAUTOCLAIM)
// once it has been idle for MinIdle; a consumer killed after the commit and
// before the XACK leaves an entry whose row exists, which the next delivery
// finds and acknowledges. An order the database refuses (the stock ran out
// there, or the user has another order) is given back to Redis's stock and
// acknowledged; an entry that fails MaxDeliveries times (a bad entry, a
// database error that does not go away) moves to the dead-letter stream.
package orders

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/stock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Schema creates the tables, if they do not exist.
//
//go:embed schema.sql
var Schema string

// Migrate applies Schema.
func Migrate(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, Schema); err != nil {
		return fmt.Errorf("orders: apply the schema: %w", err)
	}
	return nil
}

// Consumer is one consumer of a sale's stream.
type Consumer struct {
	RDB   redis.UniversalClient
	DB    *pgxpool.Pool
	Sales *stock.Sales
	Sale  string
	Name  string // unique within the group, per process

	Batch         int64         // entries read at a time; default 64
	MinIdle       time.Duration // a pending entry is claimed after this long; default 5s
	MaxDeliveries int64         // then it moves to the dead-letter stream; default 5
	// Block is how long a read waits for new entries; default 1s.
	Block time.Duration
	// Each, if set, runs before each entry is written: tests use it to
	// stop a consumer mid-batch.
	Each func()
}

// DeadLetter returns the key of sale's dead-letter stream.
func DeadLetter(sales *stock.Sales, sale string) string { return sales.Stream(sale) + ":dead" }

// Outcome counts what a consumer did.
type Outcome struct {
	Written, Refused, Already, Dead int64
}

func (c *Consumer) defaults() {
	if c.Batch <= 0 {
		c.Batch = 64
	}
	if c.MinIdle <= 0 {
		c.MinIdle = 5 * time.Second
	}
	if c.MaxDeliveries <= 0 {
		c.MaxDeliveries = 5
	}
	if c.Block <= 0 {
		c.Block = time.Second
	}
}

// Run consumes until ctx ends, then returns what it did and ctx's error; a
// Redis or database failure is retried after a pause, and returned only if
// ctx ends meanwhile.
func (c *Consumer) Run(ctx context.Context) (Outcome, error) {
	c.defaults()
	var out Outcome
	stream := c.Sales.Stream(c.Sale)
	claimFrom := "0-0"
loop:
	for ctx.Err() == nil {
		// Entries of consumers that died, or of this one's earlier failures.
		claimed, next, err := c.RDB.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: stock.OrdersGroup, Consumer: c.Name,
			MinIdle: c.MinIdle, Start: claimFrom, Count: c.Batch,
		}).Result()
		if err != nil {
			if !c.pause(ctx, fmt.Errorf("claim pending entries: %w", err)) {
				break loop
			}
			continue
		}
		claimFrom = next
		if len(claimed) > 0 {
			c.handle(ctx, stream, claimed, true, &out)
			continue
		}
		res, err := c.RDB.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: stock.OrdersGroup, Consumer: c.Name, Streams: []string{stream, ">"},
			Count: c.Batch, Block: c.Block,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			if !c.pause(ctx, fmt.Errorf("read entries: %w", err)) {
				break loop
			}
			continue
		}
		for _, s := range res {
			c.handle(ctx, stream, s.Messages, false, &out)
		}
	}
	return out, ctx.Err()
}

// pause waits a moment after a failure; false if ctx ended.
func (c *Consumer) pause(ctx context.Context, err error) bool {
	_ = err // the entry stays pending: it is retried, and dead-lettered if it keeps failing
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// handle writes each entry and acknowledges it once it is done with.
func (c *Consumer) handle(ctx context.Context, stream string, msgs []redis.XMessage, claimed bool, out *Outcome) {
	var delivered map[string]int64
	if claimed {
		delivered = c.deliveries(ctx, stream, msgs)
	}
	for _, m := range msgs {
		if ctx.Err() != nil {
			return
		}
		if c.Each != nil {
			c.Each()
		}
		if delivered[m.ID] > c.MaxDeliveries {
			if err := c.deadLetter(ctx, stream, m); err == nil {
				out.Dead++
			}
			continue
		}
		o, err := c.write(ctx, m)
		if err != nil {
			continue // pending: claimed again after MinIdle
		}
		if err := c.RDB.XAck(ctx, stream, stock.OrdersGroup, m.ID).Err(); err != nil {
			continue // the next delivery finds the row and acknowledges it
		}
		switch o {
		case written:
			out.Written++
		case refused:
			out.Refused++
		case already:
			out.Already++
		}
	}
}

type result int

const (
	written result = iota
	refused
	already
)

// intent is an entry of the stream, parsed.
type intent struct {
	order int64
	user  string
	n     int64
}

func parse(m redis.XMessage) (intent, error) {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	order, err1 := strconv.ParseInt(s("order"), 10, 64)
	n, err2 := strconv.ParseInt(s("n"), 10, 64)
	if err1 != nil || err2 != nil || s("user") == "" || n < 1 {
		return intent{}, fmt.Errorf("orders: malformed entry %s: %v", m.ID, m.Values)
	}
	return intent{order: order, user: s("user"), n: n}, nil
}

// write writes one order in one transaction.
func (c *Consumer) write(ctx context.Context, m redis.XMessage) (result, error) {
	in, err := parse(m)
	if err != nil {
		return 0, err
	}
	tx, err := c.DB.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM orders WHERE id = $1)`, in.order).Scan(&exists); err != nil {
		return 0, err
	}
	if exists {
		return already, nil // written by a delivery whose XACK was lost
	}
	tag, err := tx.Exec(ctx, `UPDATE sales SET stock = stock - $2 WHERE id = $1 AND stock >= $2`, c.Sale, in.n)
	if err != nil {
		return 0, err
	}
	refuse := tag.RowsAffected() == 0
	if !refuse {
		_, err = tx.Exec(ctx, `INSERT INTO orders (id, sale, user_id, n) VALUES ($1, $2, $3, $4)`, in.order, c.Sale, in.user, in.n)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == "23505": // UNIQUE (sale, user_id): another order of the user
			refuse = true
		case err != nil:
			return 0, err
		}
	}
	if refuse {
		_ = tx.Rollback(ctx)
		if _, err := c.Sales.GiveBack(ctx, c.Sale, in.user, in.order); err != nil && !errors.Is(err, stock.ErrNoSuchSale) {
			return 0, err
		}
		return refused, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return written, nil
}

// deliveries returns how many times each of msgs, just claimed by this
// consumer, was delivered: one XPENDING for the batch, over the range of
// its ids and this consumer's entries, unless entries of this consumer that
// it did not just claim lie in that range too (then one more per such
// batch of them). An entry missing from the map (Redis failed to answer)
// counts as delivered 0 times: it is written, and counted again at its next
// delivery.
func (c *Consumer) deliveries(ctx context.Context, stream string, msgs []redis.XMessage) map[string]int64 {
	if len(msgs) == 0 {
		return nil
	}
	n := make(map[string]int64, len(msgs))
	first, last := msgs[0].ID, msgs[0].ID
	for _, m := range msgs {
		n[m.ID] = -1 // not yet known
		if idLess(m.ID, first) {
			first = m.ID
		}
		if idLess(last, m.ID) {
			last = m.ID
		}
	}
	for left := len(msgs); left > 0; {
		p, err := c.RDB.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: stock.OrdersGroup, Consumer: c.Name,
			Start: first, End: last, Count: int64(left),
		}).Result()
		if err != nil || len(p) == 0 {
			break
		}
		for _, e := range p {
			if d, ok := n[e.ID]; ok && d < 0 {
				n[e.ID] = e.RetryCount
				left--
			}
		}
		first = "(" + p[len(p)-1].ID // exclusive: after the last one seen
	}
	for id, d := range n {
		if d < 0 {
			delete(n, id)
		}
	}
	return n
}

// idLess reports whether stream entry id a comes before b.
func idLess(a, b string) bool {
	ams, aseq, _ := strings.Cut(a, "-")
	bms, bseq, _ := strings.Cut(b, "-")
	if len(ams) != len(bms) {
		return len(ams) < len(bms)
	}
	if ams != bms {
		return ams < bms
	}
	if len(aseq) != len(bseq) {
		return len(aseq) < len(bseq)
	}
	return aseq < bseq
}

// deadLetter moves entry m to the dead-letter stream and acknowledges it.
func (c *Consumer) deadLetter(ctx context.Context, stream string, m redis.XMessage) error {
	vals := map[string]any{"id": m.ID}
	for k, v := range m.Values {
		vals[k] = v
	}
	pipe := c.RDB.TxPipeline()
	pipe.XAdd(ctx, &redis.XAddArgs{Stream: DeadLetter(c.Sales, c.Sale), Values: vals})
	pipe.XAck(ctx, stream, stock.OrdersGroup, m.ID)
	_, err := pipe.Exec(ctx)
	return err
}

// CreateSale creates sale in the database and in Redis, with stock items.
func CreateSale(ctx context.Context, db *pgxpool.Pool, sales *stock.Sales, sale string, n int64, ttl time.Duration) error {
	if _, err := db.Exec(ctx, `INSERT INTO sales (id, stock) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, sale, n); err != nil {
		return fmt.Errorf("orders: create sale %q: %w", sale, err)
	}
	if _, err := sales.Create(ctx, sale, n, ttl); err != nil {
		return err
	}
	return nil
}

// ErrNoOrder is what Status returns for an order not in the database (yet).
var ErrNoOrder = errors.New("orders: no such order")

// Order is an order row.
type Order struct {
	ID      int64     `json:"id"`
	Sale    string    `json:"sale"`
	User    string    `json:"user"`
	N       int64     `json:"n"`
	Created time.Time `json:"created_at"`
}

// Status reads order id.
func Status(ctx context.Context, db *pgxpool.Pool, id int64) (Order, error) {
	var o Order
	err := db.QueryRow(ctx, `SELECT id, sale, user_id, n, created_at FROM orders WHERE id = $1`, id).Scan(&o.ID, &o.Sale, &o.User, &o.N, &o.Created)
	if errors.Is(err, pgx.ErrNoRows) {
		return o, ErrNoOrder
	}
	return o, err
}
