package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// Defaults of the middleware.
const (
	// Header is the request header that carries the idempotency key.
	Header = "Idempotency-Key"
	// ReplayedHeader is set to "true" on a replayed response.
	ReplayedHeader = "Idempotent-Replayed"
	// DefaultMaxBody is the largest request body the middleware reads, to
	// fingerprint it; a larger one is refused with 413.
	DefaultMaxBody = 1 << 20
)

type middleware struct {
	s          *Store // with the Middleware's own Options
	next       http.Handler
	retryAfter int // seconds, for 409
}

// Middleware guards next with s, keyed by the Idempotency-Key header: the
// first request with a key runs next; a duplicate gets the response it wrote
// (status, headers, body) replayed, with the header Idempotent-Replayed:
// true. A duplicate that comes while the first runs waits for it, or, with
// WithoutWaiting, gets 409 with Retry-After: 1. The same key with
// another method, path or body gets 422; an empty or oversized key 400; a
// body over MaxBody 413. The handler runs with a context that is cancelled if
// the key's lock is lost.
//
// A response is stored if it is an answer (a 2xx, 3xx or 4xx status), and
// not if it asks the client to try again: a 5xx, 408 Request Timeout, 409
// Conflict, 425 Too Early, 429 Too Many Requests, or any response with a
// Retry-After header. The key is then free for the retry, which runs the
// handler again. A handler under lockhttp.Handler answers 409 with
// Retry-After while the request's lock is held (say, by a process that died
// mid-request, until the lock's lease ends): that answer is not stored.
//
// opts apply to this Middleware, over those given to New. A Middleware of a
// nil or zero Store, of a nil handler, or given a bad Option answers every
// request with 500 and the error, and sends nothing to Redis.
func (s *Store) Middleware(next http.Handler, opts ...Option) http.Handler {
	switch {
	case s == nil || s.locks == nil:
		return failing(errors.New("idempotency: Middleware of a nil or zero Store; get one from New"))
	case isNil(next):
		return failing(errors.New("idempotency: Middleware: nil handler"))
	}
	cfg, err := s.cfg.with("Middleware", opts)
	if err != nil {
		return failing(err)
	}
	return &middleware{s: &Store{locks: s.locks, rdb: s.rdb, cfg: cfg}, next: next, retryAfter: 1}
}

// failing returns a handler that answers every request with 500 and err.
func failing(err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	})
}

// recorded is a response as stored.
type recorded struct {
	Status int         `json:"s"`
	Header http.Header `json:"h"`
	Body   []byte      `json:"b"`
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(Header)
	if key == "" {
		if m.s.cfg.requireKey {
			http.Error(w, "missing "+Header+" header", http.StatusBadRequest)
			return
		}
		m.next.ServeHTTP(w, r)
		return
	}
	if len(key) > MaxKeyLen {
		http.Error(w, Header+" longer than "+strconv.Itoa(MaxKeyLen)+" bytes", http.StatusBadRequest)
		return
	}
	var body []byte
	var err error
	if r.Body != nil { // a server's request always has one; a test's may not
		body, err = io.ReadAll(io.LimitReader(r.Body, m.s.cfg.maxBody+1))
	}
	if err != nil {
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if int64(len(body)) > m.s.cfg.maxBody {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.RequestURI() + "\n"))
	h.Write(body)
	fp := hex.EncodeToString(h.Sum(nil))

	res, err := m.s.Do(r.Context(), key, fp, func(ctx context.Context) ([]byte, bool, error) {
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		req := r.WithContext(ctx)
		req.Body = io.NopCloser(bytes.NewReader(body))
		m.next.ServeHTTP(rec, req)
		b, err := json.Marshal(recorded{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()})
		return b, final(rec.status, rec.header), err
	})
	switch {
	case errors.Is(err, ErrMismatch):
		http.Error(w, "this "+Header+" was used with another request", http.StatusUnprocessableEntity)
		return
	case errors.Is(err, ErrInProgress):
		w.Header().Set("Retry-After", strconv.Itoa(m.retryAfter))
		http.Error(w, "a request with this "+Header+" is in progress", http.StatusConflict)
		return
	case err != nil && r.Context().Err() != nil:
		return // the client has gone
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	var rec recorded
	if err := json.Unmarshal(res.Response, &rec); err != nil {
		http.Error(w, "idempotency: the stored response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	for k, vs := range rec.Header {
		w.Header()[k] = vs
	}
	if res.Replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Body)
}

// final reports whether a response with status and header is an answer to
// store, rather than one that asks the client to try again.
func final(status int, header http.Header) bool {
	switch {
	case status < 200 || status >= 500:
		return false
	case status == http.StatusRequestTimeout, status == http.StatusConflict,
		status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		return false
	}
	return len(header.Values("Retry-After")) == 0
}

// recorder is the ResponseWriter a guarded handler writes to.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(b)
}
