package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMain runs the buyer command when a load test started this binary as
// a buyer process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == buyerCmdName {
		if err := buyerCmd(context.Background(), os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testDB makes a schema of its own for t, dropped at the end, and returns
// the URL that uses it.
func testDB(t *testing.T) string {
	t.Helper()
	redistest.Full(t, "PostgreSQL")
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, defaultPG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	schema := fmt.Sprintf("flashsale_svc_%d_%d", os.Getpid(), rand.IntN(1e9))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", defaultPG, err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	u, _ := url.Parse(defaultPG)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

type call struct {
	status int
	body   map[string]any
}

func do(t *testing.T, method, u, key, body string) call {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return call{resp.StatusCode, m}
}

// TestService: a sale created, bought, bought again with the same key
// (replayed) and with another key (already ordered), sold out, the order
// written to PostgreSQL, and bad input answered with 4xx.
func TestService(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := newService(ctx, "redis://"+srv.Addr, testDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	ts := httptest.NewServer(s.handler())
	t.Cleanup(ts.Close)

	if c := do(t, "POST", ts.URL+"/sales", "", `{"id":"s1","stock":1}`); c.status != http.StatusCreated {
		t.Fatalf("create: %+v", c)
	}
	first := do(t, "POST", ts.URL+"/sales/s1/orders", "k1", `{"user":"alice"}`)
	if first.status != http.StatusAccepted || first.body["outcome"] != "ordered" {
		t.Fatalf("buy: %+v", first)
	}
	if c := do(t, "POST", ts.URL+"/sales/s1/orders", "k1", `{"user":"alice"}`); c.status != http.StatusAccepted || c.body["order_id"] != first.body["order_id"] {
		t.Errorf("the same key again: %+v, want the first answer replayed", c)
	}
	if c := do(t, "POST", ts.URL+"/sales/s1/orders", "k2", `{"user":"alice"}`); c.status != http.StatusConflict || c.body["order_id"] != first.body["order_id"] {
		t.Errorf("another key, same user: %+v, want 409 with the user's order", c)
	}
	if c := do(t, "POST", ts.URL+"/sales/s1/orders", "k3", `{"user":"bob"}`); c.status != http.StatusGone {
		t.Errorf("sold out: %+v, want 410", c)
	}
	if c := do(t, "POST", ts.URL+"/sales/s1/orders", "k1", `{"user":"mallory"}`); c.status != http.StatusUnprocessableEntity {
		t.Errorf("the same key with another body: %d, want 422", c.status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := do(t, "GET", ts.URL+"/orders/"+first.body["order_id"].(string), "", "")
		if c.status == http.StatusOK {
			if c.body["user"] != "alice" {
				t.Errorf("order: %+v", c)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the order never reached PostgreSQL: %+v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		method, path, key, body string
		want                    int
	}{
		{"POST", "/sales", "", `{"id":"","stock":1}`, http.StatusBadRequest},
		{"POST", "/sales", "", `{"id":"x","stock":-1}`, http.StatusBadRequest},
		{"POST", "/sales", "", `{"id":"x","stock":1,"extra":true}`, http.StatusBadRequest},
		{"POST", "/sales", "", `not json`, http.StatusBadRequest},
		{"POST", "/sales", "", `{"id":"x","stock":1}{}`, http.StatusBadRequest},
		{"POST", "/sales/s1/orders", "", `{"user":"carol"}`, http.StatusBadRequest},
		{"POST", "/sales/s1/orders", "k4", `{"user":""}`, http.StatusBadRequest},
		{"POST", "/sales/s1/orders", "k5", `{"user":"carol","n":-2}`, http.StatusBadRequest},
		{"POST", "/sales/s1/orders", "k6", `{"user":"` + strings.Repeat("u", 300) + `"}`, http.StatusBadRequest},
		{"POST", "/sales/s1/orders", "k7", `{`, http.StatusBadRequest},
		{"POST", "/sales/none/orders", "k8", `{"user":"carol"}`, http.StatusNotFound},
		{"POST", "/sales/s1/orders", strings.Repeat("k", 300), `{"user":"carol"}`, http.StatusBadRequest},
		{"GET", "/orders/abc", "", "", http.StatusBadRequest},
		{"GET", "/orders/12345", "", "", http.StatusNotFound},
		{"GET", "/sales/none", "", "", http.StatusNotFound},
	} {
		if c := do(t, tc.method, ts.URL+tc.path, tc.key, tc.body); c.status != tc.want {
			t.Errorf("%s %s %q: %d, want %d (%v)", tc.method, tc.path, tc.body, c.status, tc.want, c.body)
		}
	}
}

// TestLoadTest: the load test's buyer processes against a private Redis and
// a schema of its own: every item sold once, none oversold, doubled or lost.
func TestLoadTest(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"loadtest", "-json", "-redis", "redis://" + srv.Addr, "-procs", "3",
		"-users", "300", "-stock", "100", "-clicks", "3", "-concurrency", "8"}, &out, &errOut)
	if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, &errOut)
	}
	var res loadResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("loadtest -json printed %q: %v", out.String(), err)
	}
	t.Logf("%s", out.String())
	if res.Sold != 100 || res.Oversold != 0 || res.DuplicateOrders != 0 || res.LostOrders != 0 || res.StockInDB != 0 || res.LeftInRedis != 0 {
		t.Errorf("result %+v: want 100 sold, nothing oversold, doubled or lost", res)
	}
	if res.Requests != 300*3+60 {
		t.Errorf("%d requests, want %d", res.Requests, 300*3+60)
	}
}
