package dlockotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer: the
// module's path.
const ScopeName = "github.com/dlock-go/dlock/otel"

// Attribute keys.
const (
	keyName      = attribute.Key("dlock.lock.name")
	keyKind      = attribute.Key("dlock.lock.kind")
	keyOp        = attribute.Key("dlock.op")
	keyOutcome   = attribute.Key("dlock.outcome")
	keyFence     = attribute.Key("dlock.fence")
	keyReentered = attribute.Key("dlock.reentered")
	keyHandedOff = attribute.Key("dlock.handed_off")
	keyLastHold  = attribute.Key("dlock.last_hold")
)

// Values of dlock.outcome.
const (
	outcomeAcquired    = "acquired"
	outcomeReentered   = "reentered"
	outcomeNotAcquired = "not_acquired"
	outcomeCanceled    = "canceled"
	outcomeOK          = "ok"
	outcomeError       = "error"
	outcomeGained      = "gained"
	outcomeResigned    = "resigned"
	outcomeLost        = "lost"
)

// Bucket boundaries, in seconds, advised for the histograms.
var (
	acquireBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBounds    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
)

// Option configures Hooks.
type Option interface {
	apply(*config)
}

type config struct {
	mp metric.MeterProvider
	tp trace.TracerProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithMeterProvider sets the MeterProvider the metrics are recorded with.
// Default, and if mp is nil: the global one, otel.GetMeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithTracerProvider sets the TracerProvider the spans are recorded with.
// Default, and if tp is nil: the global one, otel.GetTracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// Hooks returns hooks that record the metrics and spans described in the
// package documentation; pass them to dlock.New with dlock.WithHooks. Without
// WithMeterProvider or WithTracerProvider, Hooks takes the global providers as
// they are when it is called; a global provider not set yet forwards to the
// one otel.SetMeterProvider or otel.SetTracerProvider sets later.
//
// The hooks are safe for concurrent use, and one set of them may serve many
// Clients. Errors in creating the instruments are passed to otel.Handle; an
// instrument the MeterProvider does not return records nothing.
func Hooks(opts ...Option) dlock.Hooks {
	var cfg config
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	m := cfg.mp.Meter(ScopeName)
	r := &recorder{
		tracer: cfg.tp.Tracer(ScopeName),
		acquire: histogram(m, "dlock.lock.acquire.duration",
			"Time an acquisition of a lock took, acquired or not.", acquireBounds),
		hold: histogram(m, "dlock.lock.hold.duration",
			"Time a lock was held, from its acquisition to the Unlock that gave it up.", holdBounds),
		contentions: counter(m, "dlock.lock.contentions", "{acquisition}",
			"Acquisitions that found the lock held and waited for it."),
		handoffs: counter(m, "dlock.lock.handoffs", "{acquisition}",
			"Acquisitions that took the lock on a release's hand-off."),
		renewals: counter(m, "dlock.lease.renewals", "{renewal}",
			"Renewals and extensions of leases, and renewals that failed and are retried."),
		lost: counter(m, "dlock.lease.lost", "{lease}",
			"Leases lost."),
		terms: counter(m, "dlock.election.terms", "{term}",
			"Terms of leadership of Elections gained, resigned and lost by this process's candidates."),
	}
	return dlock.Hooks{
		LockStart:    r.lockStart,
		Contended:    r.contended,
		LockEnd:      r.lockEnd,
		UnlockStart:  r.unlockStart,
		UnlockEnd:    r.unlockEnd,
		Extended:     r.extended,
		ExtendFailed: r.extendFailed,
		Lost:         r.leaseLost,

		LeadershipEnded: r.leadershipEnded,
	}
}

func histogram(m metric.Meter, name, desc string, bounds []float64) metric.Float64Histogram {
	h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(bounds...))
	if err != nil {
		otel.Handle(fmt.Errorf("dlockotel: create histogram %s: %w", name, err))
	}
	if h == nil {
		return noop.Float64Histogram{}
	}
	return h
}

func counter(m metric.Meter, name, unit, desc string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
	if err != nil {
		otel.Handle(fmt.Errorf("dlockotel: create counter %s: %w", name, err))
	}
	if c == nil {
		return noop.Int64Counter{}
	}
	return c
}

// recorder holds the instruments the hooks record with.
type recorder struct {
	tracer      trace.Tracer
	acquire     metric.Float64Histogram
	hold        metric.Float64Histogram
	contentions metric.Int64Counter
	handoffs    metric.Int64Counter
	renewals    metric.Int64Counter
	lost        metric.Int64Counter
	terms       metric.Int64Counter
}

// call is what a Start hook hands its End hook through the context.
type call struct {
	op   string
	span trace.Span
}

type callKey struct{}

// callOf returns the call a Start hook put in ctx, or nil if there is none.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (r *recorder) lockStart(ctx context.Context, l dlock.LockInfo, op string) context.Context {
	ctx, span := r.tracer.Start(ctx, "dlock "+op, trace.WithAttributes(
		keyName.String(l.Name), keyKind.String(l.Kind), keyOp.String(op)))
	return context.WithValue(ctx, callKey{}, &call{op: op, span: span})
}

func (r *recorder) contended(ctx context.Context, l dlock.LockInfo) {
	c := callOf(ctx)
	r.contentions.Add(ctx, 1, metric.WithAttributes(lockAttrs(l, c)...))
	if c != nil {
		c.span.AddEvent("contended")
	}
}

// lockAttrs are the attributes of an acquisition's metrics but its outcome.
func lockAttrs(l dlock.LockInfo, c *call) []attribute.KeyValue {
	if c == nil {
		return []attribute.KeyValue{keyKind.String(l.Kind)}
	}
	return []attribute.KeyValue{keyKind.String(l.Kind), keyOp.String(c.op)}
}

func (r *recorder) lockEnd(ctx context.Context, l dlock.LockInfo, res dlock.LockResult) {
	c := callOf(ctx)
	outcome := lockOutcome(res)
	attrs := lockAttrs(l, c)
	r.acquire.Record(ctx, res.Waited.Seconds(), metric.WithAttributes(append(attrs, keyOutcome.String(outcome))...))
	if res.HandedOff {
		r.handoffs.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
	if l.Kind == string(dlock.KindElection) && res.Err == nil {
		r.terms.Add(ctx, 1, metric.WithAttributes(keyOutcome.String(outcomeGained)))
	}
	if c == nil {
		return
	}
	span := c.span
	span.SetAttributes(keyOutcome.String(outcome))
	if res.Err == nil {
		span.SetAttributes(keyFence.Int64(res.Fence), keyReentered.Bool(res.Reentered),
			keyHandedOff.Bool(res.HandedOff))
	}
	if outcome == outcomeError {
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, res.Err.Error())
	}
	span.End()
}

// lockOutcome is the dlock.outcome of an acquisition. A wait given up on its
// context matches both dlock.ErrNotAcquired and the context's error, so the
// context's error is looked for first.
func lockOutcome(res dlock.LockResult) string {
	switch err := res.Err; {
	case err == nil && res.Reentered:
		return outcomeReentered
	case err == nil:
		return outcomeAcquired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCanceled
	case errors.Is(err, dlock.ErrNotAcquired):
		return outcomeNotAcquired
	}
	return outcomeError
}

func (r *recorder) unlockStart(ctx context.Context, l dlock.LockInfo) context.Context {
	ctx, span := r.tracer.Start(ctx, "dlock unlock", trace.WithAttributes(
		keyName.String(l.Name), keyKind.String(l.Kind)))
	return context.WithValue(ctx, callKey{}, &call{op: "unlock", span: span})
}

func (r *recorder) unlockEnd(ctx context.Context, l dlock.LockInfo, res dlock.UnlockResult) {
	outcome := outcomeOK
	if res.Err != nil {
		outcome = outcomeError
	}
	if res.Last {
		r.hold.Record(ctx, res.Held.Seconds(), metric.WithAttributes(
			keyKind.String(l.Kind), keyOutcome.String(outcome)))
	}
	c := callOf(ctx)
	if c == nil {
		return
	}
	span := c.span
	span.SetAttributes(keyOutcome.String(outcome), keyFence.Int64(res.Fence), keyLastHold.Bool(res.Last))
	if res.Err != nil {
		span.RecordError(res.Err)
		span.SetStatus(codes.Error, res.Err.Error())
	}
	span.End()
}

func (r *recorder) extended(ctx context.Context, l dlock.LockInfo, _ int64) {
	r.renewals.Add(ctx, 1, metric.WithAttributes(keyKind.String(l.Kind), keyOutcome.String(outcomeOK)))
}

func (r *recorder) extendFailed(ctx context.Context, l dlock.LockInfo, _ int64, _ error) {
	r.renewals.Add(ctx, 1, metric.WithAttributes(keyKind.String(l.Kind), keyOutcome.String(outcomeError)))
}

func (r *recorder) leaseLost(ctx context.Context, l dlock.LockInfo, _ int64, _ error) {
	r.lost.Add(ctx, 1, metric.WithAttributes(keyKind.String(l.Kind)))
}

// leadershipEnded counts a term that ended: lost, or resigned (by Resign,
// or by Client.Close, which resigns what its Client leads).
func (r *recorder) leadershipEnded(ctx context.Context, _ dlock.LockInfo, _ int64, err error) {
	outcome := outcomeResigned
	if errors.Is(err, dlock.ErrLockLost) {
		outcome = outcomeLost
	}
	r.terms.Add(ctx, 1, metric.WithAttributes(keyOutcome.String(outcome)))
}
