package pds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/pds/pdstest"
)

const (
	alice = syntax.DID("did:plc:alice234567abcdefghijklm")
	bob   = syntax.DID("did:plc:bob234567abcdefghijklmno")
	posts = syntax.NSID("app.bsky.feed.post")
	likes = syntax.NSID("app.bsky.feed.like")
)

func post(text string) string {
	return `{"$type":"app.bsky.feed.post","text":"` + text + `","createdAt":"2026-01-01T00:00:00Z"}`
}

// tid returns the i-th of a run of increasing record keys.
func tid(i int) syntax.RecordKey {
	return syntax.RecordKey(syntax.NewTID(int64(1_700_000_000_000_000+i), 0).String())
}

func newTestClient(timeout time.Duration) *Client {
	return NewClient(egress.NewClient(egress.Options{AllowPrivateNetworks: true, Timeout: timeout}), Options{Timeout: timeout})
}

func startPDS(t *testing.T) *pdstest.Server {
	t.Helper()
	srv := pdstest.NewServer()
	t.Cleanup(srv.Close)
	return srv
}

func TestListRecordsPages(t *testing.T) {
	srv := startPDS(t)
	for i := range 7 {
		srv.AddRecord(alice, posts, tid(i), post(fmt.Sprint(i)))
	}
	srv.AddRecord(alice, likes, tid(100), `{"$type":"app.bsky.feed.like"}`)
	c := newTestClient(5 * time.Second)

	var got []syntax.RecordKey
	cursor, pages := "", 0
	for {
		page, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if page.Skipped != 0 {
			t.Fatalf("skipped %d", page.Skipped)
		}
		for _, r := range page.Records {
			got = append(got, r.RKey)
			if r.URI.String() != "at://"+alice.String()+"/"+posts.String()+"/"+r.RKey.String() {
				t.Fatalf("uri %s", r.URI)
			}
			if _, err := syntax.ParseCID(r.CID); err != nil {
				t.Fatalf("cid %q: %v", r.CID, err)
			}
			var v struct{ Text string }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatal(err)
			}
		}
		if (len(page.Records) == 0) != (page.Cursor == "") {
			t.Fatalf("page of %d records with cursor %q", len(page.Records), page.Cursor)
		}
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
	}
	want := []syntax.RecordKey{tid(6), tid(5), tid(4), tid(3), tid(2), tid(1), tid(0)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order: got %v, want %v", got, want)
	}
	if pages != 4 || srv.Requests(alice, posts) != 4 {
		t.Fatalf("pages %d, requests %d; want 4 (3+3+1, then an empty page)", pages, srv.Requests(alice, posts))
	}

	srv.DeleteRecord(alice, posts, tid(6))
	page, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 1, "")
	if err != nil || len(page.Records) != 1 || page.Records[0].RKey != tid(5) {
		t.Fatalf("after delete: %+v %v", page, err)
	}

	if _, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 101, ""); err == nil {
		t.Fatal("limit 101 accepted")
	}
}

func TestGetRecord(t *testing.T) {
	srv := startPDS(t)
	cid := srv.AddRecord(alice, posts, tid(1), post("hello"))
	c := newTestClient(5 * time.Second)

	rec, err := c.GetRecord(t.Context(), srv.URL()+"/", alice, posts, tid(1))
	if err != nil {
		t.Fatal(err)
	}
	if rec.CID != cid || rec.RKey != tid(1) || !strings.Contains(string(rec.Value), "hello") {
		t.Fatalf("got %+v", rec)
	}
	_, err = c.GetRecord(t.Context(), srv.URL(), alice, posts, tid(2))
	if KindOf(err) != KindNotFound || Retryable(err) {
		t.Fatalf("missing record: %v", err)
	}
	_, err = c.GetRecord(t.Context(), srv.URL(), bob, posts, tid(1))
	if KindOf(err) != KindRepoGone {
		t.Fatalf("unknown repo: %v", err)
	}
	// A record whose $type is not its collection is a bad answer here.
	srv.AddRecord(alice, posts, tid(3), `{"$type":"app.bsky.feed.like"}`)
	if _, err := c.GetRecord(t.Context(), srv.URL(), alice, posts, tid(3)); KindOf(err) != KindBadResponse {
		t.Fatalf("wrong $type: %v", err)
	}
}

func TestFaults(t *testing.T) {
	srv := startPDS(t)
	for i := range 5 {
		srv.AddRecord(alice, posts, tid(i), post("x"))
	}
	// The hanging and slow cases wait out a short timeout; the others get
	// a long one, so a 4 MiB body read on a loaded machine (under -race)
	// fails on its size, as it should, not on time.
	const timeout = 300 * time.Millisecond
	c := newTestClient(timeout)
	patient := newTestClient(10 * time.Second)
	for _, tc := range []struct {
		name      string
		fault     pdstest.Fault
		cursor    string
		kind      Kind
		retryable bool
		check     func(*testing.T, *Error)
	}{
		{"500", pdstest.FaultStatus500, "", KindUpstream, true, nil},
		{"429", pdstest.FaultRateLimited, "", KindRateLimited, true, func(t *testing.T, e *Error) {
			if e.RetryAfter != 7*time.Second || e.Name != "RateLimitExceeded" {
				t.Fatalf("got %+v", e)
			}
		}},
		{"hang", pdstest.FaultHang, "", KindTimeout, true, nil},
		{"slow body", pdstest.FaultSlowBody, "", KindTimeout, true, nil},
		{"truncated", pdstest.FaultTruncated, "", KindBadResponse, false, nil},
		{"bad json", pdstest.FaultBadJSON, "", KindBadResponse, false, nil},
		{"huge body", pdstest.FaultHugeBody, "", KindBadResponse, false, func(t *testing.T, e *Error) {
			if !errors.Is(e, egress.ErrTooLarge) {
				t.Fatalf("got %+v", e)
			}
		}},
		{"content type", pdstest.FaultWrongContentType, "", KindBadResponse, false, nil},
		{"deactivated", pdstest.FaultRepoDeactivated, "", KindRepoGone, false, func(t *testing.T, e *Error) {
			if e.Status != 400 || e.Name != "RepoDeactivated" {
				t.Fatalf("got %+v", e)
			}
		}},
		{"takendown", pdstest.FaultRepoTakendown, "", KindRepoGone, false, nil},
		{"bad cursor", pdstest.FaultBadCursor, tid(3).String(), KindBadCursor, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.Fail(alice, posts, tc.fault)
			defer srv.Fail(alice, posts, pdstest.FaultNone)
			start := time.Now()
			client := patient
			if tc.kind == KindTimeout {
				client = c
			}
			_, err := client.ListRecords(t.Context(), srv.URL(), alice, posts, 100, tc.cursor)
			if d := time.Since(start); tc.kind == KindTimeout && d > timeout+2*time.Second {
				t.Fatalf("took %v", d)
			}
			var e *Error
			if !errors.As(err, &e) || e.Kind != tc.kind {
				t.Fatalf("got %v, want kind %s", err, tc.kind)
			}
			if Retryable(err) != tc.retryable {
				t.Fatalf("Retryable = %v", Retryable(err))
			}
			if tc.check != nil {
				tc.check(t, e)
			}
		})
	}

	t.Run("unknown repo", func(t *testing.T) {
		_, err := c.ListRecords(t.Context(), srv.URL(), bob, posts, 10, "")
		if KindOf(err) != KindRepoGone || Retryable(err) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("repeating cursor", func(t *testing.T) {
		srv.Fail(alice, posts, pdstest.FaultRepeatCursor)
		defer srv.Fail(alice, posts, pdstest.FaultNone)
		page, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 2, tid(4).String())
		if err != nil || page.Cursor != tid(4).String() || len(page.Records) != 2 {
			t.Fatalf("got %+v %v", page, err)
		}
	})
	t.Run("fail once", func(t *testing.T) {
		srv.FailN(alice, "", pdstest.FaultStatus500, 1)
		before := srv.Requests(alice, posts)
		if _, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 10, ""); KindOf(err) != KindUpstream {
			t.Fatalf("first: %v", err)
		}
		if _, err := c.ListRecords(t.Context(), srv.URL(), alice, posts, 10, ""); err != nil {
			t.Fatalf("second: %v", err)
		}
		if got := srv.Requests(alice, posts) - before; got != 2 {
			t.Fatalf("requests: %d", got)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		srv.Fail(alice, posts, pdstest.FaultHang)
		defer srv.Fail(alice, posts, pdstest.FaultNone)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := NewClient(egress.NewClient(egress.Options{AllowPrivateNetworks: true}), Options{}).
			ListRecords(ctx, srv.URL(), alice, posts, 10, "")
		if !errors.Is(err, context.Canceled) || KindOf(err) != 0 || Retryable(err) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestUnreachableAndForbidden(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := newTestClient(2 * time.Second)
	if _, err := c.ListRecords(t.Context(), url, alice, posts, 10, ""); KindOf(err) != KindUpstream || !Retryable(err) {
		t.Fatalf("connection refused: %v", err)
	}

	strict := NewClient(egress.NewClient(egress.Options{}), Options{})
	for _, u := range []string{"http://127.0.0.1:1", "http://10.0.0.1", "http://169.254.169.254", "http://localhost:1", "ftp://pds.example.com", "not a url", ""} {
		_, err := strict.ListRecords(t.Context(), u, alice, posts, 10, "")
		if KindOf(err) != KindForbidden || Retryable(err) {
			t.Fatalf("%s: %v", u, err)
		}
	}
}

// TestSkipsInvalidRecords serves one hand-written page mixing valid and
// invalid records; the page counts, the invalid ones are counted.
func TestSkipsInvalidRecords(t *testing.T) {
	body := `{"cursor":"3kaaaaaaaaa22","records":[` + strings.Join([]string{
		rec(alice, posts, "3kaaaaaaaab22", post("ok")),
		rec(bob, posts, "3kaaaaaaaac22", post("other repo")),
		rec(alice, likes, "3kaaaaaaaad22", post("other collection")),
		rec(alice, posts, "3kaaaaaaaae22", `{"$type":"app.bsky.feed.like"}`),
		rec(alice, posts, "3kaaaaaaaaf22", `[1,2]`),
		`"not an object"`,
		rec(alice, posts, "3kaaaaaaaag22", post("ok too")),
	}, ",") + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	defer srv.Close()
	page, err := newTestClient(5*time.Second).ListRecords(t.Context(), srv.URL, alice, posts, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Skipped != 5 || page.Cursor != "3kaaaaaaaaa22" {
		t.Fatalf("got %d records, %d skipped, cursor %q", len(page.Records), page.Skipped, page.Cursor)
	}
}

func rec(did syntax.DID, coll syntax.NSID, rkey, value string) string {
	return `{"uri":"at://` + did.String() + "/" + coll.String() + "/" + rkey + `","cid":"` + pdstest.FakeCID([]byte(value)) + `","value":` + value + `}`
}

func TestDeclaredLengthOverCap(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "5000")
		w.Write([]byte(`{"records":[]}`))
	}))
	defer srv.Close()
	c := NewClient(egress.NewClient(egress.Options{AllowPrivateNetworks: true}), Options{MaxBodyBytes: 1000})
	_, err := c.ListRecords(t.Context(), srv.URL, alice, posts, 10, "")
	if KindOf(err) != KindBadResponse || !errors.Is(err, egress.ErrTooLarge) {
		t.Fatalf("got %v", err)
	}
}

// TestGetRecordRefusesInvalidUTF8: encoding/json accepts invalid UTF-8
// inside strings, so only an explicit check keeps such a record out of the
// store and out of getFeed responses.
func TestGetRecordRefusesInvalidUTF8(t *testing.T) {
	srv := startPDS(t)
	srv.AddRecord(alice, posts, tid(1), post("caf\xe9"))
	c := newTestClient(5 * time.Second)
	if _, err := c.GetRecord(t.Context(), srv.URL(), alice, posts, tid(1)); KindOf(err) != KindBadResponse {
		t.Fatalf("invalid UTF-8: %v, want KindBadResponse", err)
	}
}

func TestGetRecordRefusesOversizedRecord(t *testing.T) {
	srv := startPDS(t)
	srv.AddRecord(alice, posts, tid(1), sizedPost(MaxRecordBytes))
	srv.AddRecord(alice, posts, tid(2), sizedPost(MaxRecordBytes+1))
	c := newTestClient(5 * time.Second)
	if _, err := c.GetRecord(t.Context(), srv.URL(), alice, posts, tid(1)); err != nil {
		t.Fatalf("record at the cap: %v", err)
	}
	if _, err := c.GetRecord(t.Context(), srv.URL(), alice, posts, tid(2)); KindOf(err) != KindBadResponse {
		t.Fatalf("record over the cap: %v, want KindBadResponse", err)
	}
}

// TestListRecordsCapsPageAtLimit: a PDS that answers with more records
// than asked for gets only the first limit of them taken; the rest are
// counted over the limit, not as invalid.
func TestListRecordsCapsPageAtLimit(t *testing.T) {
	var recs []string
	for i := range 5 {
		recs = append(recs, rec(alice, posts, tid(10-i).String(), post(fmt.Sprint(i))))
	}
	body := `{"cursor":"` + tid(6).String() + `","records":[` + strings.Join(recs, ",") + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	defer srv.Close()
	page, err := newTestClient(5*time.Second).ListRecords(t.Context(), srv.URL, alice, posts, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 2 || page.Records[0].RKey != tid(10) || page.Records[1].RKey != tid(9) || page.OverLimit != 3 || page.Skipped != 0 {
		t.Fatalf("got %d records, %d over the limit, %d skipped; want the first 2 and 3 over the limit, none skipped as invalid",
			len(page.Records), page.OverLimit, page.Skipped)
	}
}
