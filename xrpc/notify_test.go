package xrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/atfeeds/appview/lexicons"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	notifyURL    = "/xrpc/" + testNamespace + ".notifyOfUpdate"
	notifySecret = "correct horse battery staple"
)

// fakeNotifier records the URIs it is given and reports every one as
// indexed, unless it is told to fail.
type fakeNotifier struct {
	mu    sync.Mutex
	calls [][]syntax.ATURI
	err   error
}

func (f *fakeNotifier) NotifyOfUpdate(ctx context.Context, uris []syntax.ATURI) (NotifyResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, uris)
	if f.err != nil {
		return NotifyResult{}, f.err
	}
	var res NotifyResult
	for _, u := range uris {
		res.Indexed = append(res.Indexed, u.String())
	}
	return res, nil
}

func (f *fakeNotifier) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func post(t *testing.T, url, auth, contentType, body string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func uri(i int) string { return fmt.Sprintf("at://%s/app.bsky.feed.post/3k%011d", alice, i) }

func TestNotifyOfUpdate(t *testing.T) {
	fn := &fakeNotifier{}
	cfg := testConfig(newFakeReader())
	cfg.Notify, cfg.NotifySecret = fn, notifySecret
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	base := serve(t, cfg)
	bearer := "Bearer " + notifySecret

	res := post(t, base+notifyURL, bearer, "application/json; charset=utf-8",
		fmt.Sprintf(`{"uri":%q,"uris":[%q,%q],"future":true}`, uri(1), uri(2), uri(1)))
	if res.Status != http.StatusOK {
		t.Fatalf("status %d: %s", res.Status, res.Body)
	}
	var got NotifyResult
	if err := json.Unmarshal(res.Body, &got); err != nil {
		t.Fatal(err)
	}
	// uri first, then uris, a repeated URI once.
	if want := []string{uri(1), uri(2)}; !slices.Equal(got.Indexed, want) {
		t.Errorf("indexed = %v, want %v", got.Indexed, want)
	}
	if !strings.Contains(string(res.Body), `"deleted":[]`) || !strings.Contains(string(res.Body), `"errors":[]`) {
		t.Errorf("empty lists must be [] not null: %s", res.Body)
	}

	for _, tc := range []struct {
		name, auth, contentType, body string
		status                        int
		errName                       string
	}{
		{"no secret", "", "application/json", `{"uri":"` + uri(1) + `"}`, 401, "AuthenticationRequired"},
		{"wrong secret", "Bearer nope", "application/json", `{"uri":"` + uri(1) + `"}`, 401, "AuthenticationRequired"},
		{"secret with a suffix", bearer + "x", "application/json", `{"uri":"` + uri(1) + `"}`, 401, "AuthenticationRequired"},
		{"basic auth", "Basic " + notifySecret, "application/json", `{"uri":"` + uri(1) + `"}`, 401, "AuthenticationRequired"},
		{"not json", bearer, "application/json", `uri=at://x`, 400, "InvalidRequest"},
		{"an array", bearer, "application/json", `["` + uri(1) + `"]`, 400, "InvalidRequest"},
		{"null", bearer, "application/json", `null`, 400, "InvalidRequest"},
		{"two objects", bearer, "application/json", `{"uri":"` + uri(1) + `"}{}`, 400, "InvalidRequest"},
		{"uris of numbers", bearer, "application/json", `{"uris":[1]}`, 400, "InvalidRequest"},
		{"nothing", bearer, "application/json", `{}`, 400, "InvalidRequest"},
		{"bad uri", bearer, "application/json", `{"uri":"https://example.com/"}`, 400, "InvalidRequest"},
		{"wrong content type", bearer, "text/plain", `{"uri":"` + uri(1) + `"}`, 400, "InvalidRequest"},
		{"too many", bearer, "application/json", tooMany(MaxNotifyURIs + 1), 400, "InvalidRequest"},
		{"too many with uri", bearer, "application/json", `{"uri":"` + uri(99) + `",` + tooMany(MaxNotifyURIs)[1:], 400, "InvalidRequest"},
		{"huge body", bearer, "application/json", `{"uri":"` + strings.Repeat("a", maxNotifyBody) + `"}`, 413, "PayloadTooLarge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := fn.callCount()
			res := post(t, base+notifyURL, tc.auth, tc.contentType, tc.body)
			if res.Status != tc.status {
				t.Fatalf("status %d, want %d: %s", res.Status, tc.status, res.Body)
			}
			if env := decodeEnvelope(t, res.Body); env.Error != tc.errName {
				t.Errorf("error %q, want %q", env.Error, tc.errName)
			}
			if tc.status == 401 && res.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if fn.callCount() != calls {
				t.Error("the notifier was called")
			}
		})
	}
	if res := post(t, base+notifyURL, bearer, "application/json", tooMany(MaxNotifyURIs)); res.Status != http.StatusOK {
		t.Errorf("%d URIs: %d %s", MaxNotifyURIs, res.Status, res.Body)
	}

	// A query's method is not a procedure's.
	res = do(t, http.MethodGet, base+notifyURL)
	if res.Status != http.StatusMethodNotAllowed || res.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d allow %q", res.Status, res.Header.Get("Allow"))
	}
	if res := post(t, base+getFeedURL, bearer, "application/json", `{}`); res.Status != http.StatusMethodNotAllowed {
		t.Errorf("POST getFeed: %d", res.Status)
	}

	// The daemon's own failure is a 500 without details.
	fn.mu.Lock()
	fn.err = errors.New("database is on fire")
	fn.mu.Unlock()
	res = post(t, base+notifyURL, bearer, "application/json", `{"uri":"`+uri(1)+`"}`)
	if res.Status != http.StatusInternalServerError || strings.Contains(string(res.Body), "fire") {
		t.Errorf("notifier error: %d %s", res.Status, res.Body)
	}
	// A database too busy to take the write in time is not broken: 503
	// with Retry-After, so the app tries again.
	fn.mu.Lock()
	fn.err = fmt.Errorf("apply: %w: context deadline exceeded", ErrNotifyBusy)
	fn.mu.Unlock()
	res = post(t, base+notifyURL, bearer, "application/json", `{"uri":"`+uri(1)+`"}`)
	if res.Status != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(res.Body), `"error":"NotEnoughResources"`) {
		t.Errorf("busy notifier: %d %q %s", res.Status, res.Header.Get("Retry-After"), res.Body)
	}

	if n := testutil.ToFloat64(newMetrics(reg).requests.WithLabelValues("notifyOfUpdate", "401")); n != 4 {
		t.Errorf("401s counted under notifyOfUpdate: %v, want 4", n)
	}
}

func tooMany(n int) string {
	var uris []string
	for i := range n {
		uris = append(uris, `"`+uri(i)+`"`)
	}
	return `{"uris":[` + strings.Join(uris, ",") + `]}`
}

func TestNotifyOfUpdateDisabled(t *testing.T) {
	base := serve(t, testConfig(newFakeReader()))
	for _, auth := range []string{"", "Bearer " + notifySecret} {
		res := post(t, base+notifyURL, auth, "application/json", `{"uri":"`+uri(1)+`"}`)
		if res.Status != http.StatusNotImplemented {
			t.Fatalf("disabled: %d %s", res.Status, res.Body)
		}
		if env := decodeEnvelope(t, res.Body); env.Error != "MethodNotImplemented" {
			t.Errorf("disabled: error %q", env.Error)
		}
	}
}

func TestNotifyNeedsSecret(t *testing.T) {
	cfg := testConfig(newFakeReader())
	cfg.Notify = &fakeNotifier{}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "notify_secret") {
		t.Fatalf("Validate without a secret: %v", err)
	}
}

// A secret with whitespace around it can never be matched: the bearer
// token is trimmed before it is compared (and an HTTP header value cannot
// end in a newline at all). Validate refuses such a secret rather than
// serve a method no one can call; without the check it passed, and every
// call with the configured secret was a 401.
func TestNotifySecretWithSurroundingSpaceIsRefused(t *testing.T) {
	for _, secret := range []string{notifySecret + " ", " " + notifySecret, "\t" + notifySecret + "\t", notifySecret + "\n"} {
		cfg := testConfig(newFakeReader())
		cfg.Notify, cfg.NotifySecret = &fakeNotifier{}, secret
		err := cfg.Validate()
		if err != nil {
			if msg := err.Error(); !strings.Contains(msg, "notify_secret: must not begin or end with whitespace") || strings.Contains(msg, notifySecret) {
				t.Errorf("secret %q: error %q, want one naming notify_secret and the whitespace, without the secret", secret, msg)
			}
			continue
		}
		if strings.ContainsAny(secret, "\r\n") {
			t.Errorf("secret %q: accepted, but no header can carry it", secret)
			continue
		}
		// Accepted: then the secret as configured must authenticate.
		base := serve(t, cfg)
		if res := post(t, base+notifyURL, "Bearer "+secret, "application/json", fmt.Sprintf(`{"uri":%q}`, uri(1))); res.Status != http.StatusOK {
			t.Errorf("secret %q: accepted by Validate, but a call sending it is answered %d %s", secret, res.Status, res.Body)
		}
	}
}

// The answer's fields are the Lexicon's: every field declared, every
// required one present (the e2e tests hold getFeed to the reference
// validator; this catches drift in a plain go test).
func TestNotifyResultMatchesLexicon(t *testing.T) {
	docs, err := lexicons.Render(lexicons.DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	type object struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	var lex struct {
		Defs struct {
			Main struct {
				Output struct {
					Schema object `json:"schema"`
				} `json:"output"`
			} `json:"main"`
			URIError object `json:"uriError"`
		} `json:"defs"`
	}
	if err := json.Unmarshal(docs[lexicons.DefaultNamespace+".notifyOfUpdate"], &lex); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(NotifyResult{Indexed: []string{uri(1)}, Deleted: []string{},
		Errors: []NotifyError{{URI: uri(2), Error: NotifyErrUpstreamFailure, Message: "pds down"}}})
	var got struct {
		Top    map[string]json.RawMessage
		Errors []map[string]json.RawMessage `json:"errors"`
	}
	json.Unmarshal(b, &got.Top)
	json.Unmarshal(b, &got)
	check := func(what string, fields map[string]json.RawMessage, o object) {
		for k := range fields {
			if _, ok := o.Properties[k]; !ok {
				t.Errorf("%s: field %q is not in the Lexicon", what, k)
			}
		}
		for _, k := range o.Required {
			if _, ok := fields[k]; !ok {
				t.Errorf("%s: required field %q missing", what, k)
			}
		}
	}
	check("output", got.Top, lex.Defs.Main.Output.Schema)
	check("uriError", got.Errors[0], lex.Defs.URIError)
	for _, name := range []string{NotifyErrInvalidURI, NotifyErrUnsupportedCollection, NotifyErrNotInScope,
		NotifyErrAccountNotFound, NotifyErrInvalidRecord, NotifyErrUpstreamFailure} {
		if !strings.Contains(string(lex.Defs.URIError.Properties["error"]), `"`+name+`"`) {
			t.Errorf("error name %s is not among the Lexicon's knownValues", name)
		}
	}
}

// TestNotifyRepeatedURIsCountOnce: the Lexicon says "at most 25 in all;
// repeated URIs count once". 25 distinct URIs, one of them given both as
// uri and in uris, are within the bound.
func TestNotifyRepeatedURIsCountOnce(t *testing.T) {
	fn := &fakeNotifier{}
	cfg := testConfig(newFakeReader())
	cfg.Notify, cfg.NotifySecret = fn, notifySecret
	base := serve(t, cfg)
	var uris []string
	for i := range MaxNotifyURIs {
		uris = append(uris, fmt.Sprintf("%q", uri(i)))
	}
	body := fmt.Sprintf(`{"uri":%q,"uris":[%s]}`, uri(0), strings.Join(uris, ","))
	res := post(t, base+notifyURL, "Bearer "+notifySecret, "application/json", body)
	if res.Status != http.StatusOK {
		t.Fatalf("%d distinct URIs, one repeated: status %d: %s", MaxNotifyURIs, res.Status, res.Body)
	}
	if n := len(fn.calls[0]); n != MaxNotifyURIs {
		t.Errorf("notifier got %d URIs, want %d", n, MaxNotifyURIs)
	}
}
