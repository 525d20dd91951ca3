package appview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/xrpc"
)

const testNotifySecret = "a-notify-secret-for-tests"

func postURI(author, rkey string) string { return "at://" + author + "/" + postNSID + "/" + rkey }

// notifyCall posts a notifyOfUpdate body and returns the status and body.
func (td *testDaemon) notifyCall(t *testing.T, secret, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, td.base+"/xrpc/com.example.appview.notifyOfUpdate", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (td *testDaemon) notify(t *testing.T, uris ...string) xrpc.NotifyResult {
	t.Helper()
	b, _ := json.Marshal(map[string][]string{"uris": uris})
	status, body := td.notifyCall(t, testNotifySecret, string(b))
	if status != http.StatusOK {
		t.Fatalf("notifyOfUpdate %v: %d %s", uris, status, body)
	}
	var res xrpc.NotifyResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// texts reads the texts of an actor's feed, newest first.
func (td *testDaemon) texts(t *testing.T, actor string) []string {
	t.Helper()
	var page feedResponse
	td.getJSON(t, "/xrpc/com.example.appview.getFeed?"+url.Values{"feed": {"following"}, "actor": {actor}}.Encode(), &page)
	var out []string
	for _, r := range page.Records {
		var v struct{ Text string }
		json.Unmarshal(r.Value, &v)
		out = append(out, v.Text)
	}
	return out
}

func (n *network) pdsText(author, rkey, text string) {
	n.pds.AddRecord(syntax.DID(author), postNSID, syntax.RecordKey(rkey),
		fmt.Sprintf(`{"$type":"app.bsky.feed.post","text":%q,"createdAt":%q}`, text, time.Now().UTC().Format(time.RFC3339)))
}

func errorNames(res xrpc.NotifyResult) map[string]string {
	out := map[string]string{}
	for _, e := range res.Errors {
		out[e.URI] = e.Error
	}
	return out
}

func TestNotifyOfUpdate(t *testing.T) {
	n := newNetwork(t)
	alice, carol, dave := n.account("alice"), n.account("carol"), n.account("dave")
	ghost, stranger := user("ghost"), n.account("stranger") // ghost is not in PLC
	n.pdsFollow(alice, carol, "3kfollowcarol")
	n.pdsFollow(alice, dave, "3kfollowdave2")
	n.pdsFollow(alice, ghost, "3kfollowghost")
	cfg := n.config(t)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	if got := td.feed(t, alice); len(got) != 0 { // the first read: alice is a viewer
		t.Fatalf("first read = %v", got)
	}

	// Create: carol posts, her app notifies, alice sees it before the stream.
	rk := rkeyAt(time.Now())
	n.pdsText(carol, rk, "hello")
	res := td.notify(t, postURI(carol, rk))
	if !slices.Equal(res.Indexed, []string{postURI(carol, rk)}) || len(res.Deleted)+len(res.Errors) != 0 {
		t.Fatalf("create: %+v", res)
	}
	if got := td.texts(t, alice); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("alice after notified create = %v", got)
	}

	// Unchanged: the same record again changes nothing.
	if res := td.notify(t, postURI(carol, rk)); !slices.Equal(res.Indexed, []string{postURI(carol, rk)}) {
		t.Fatalf("unchanged: %+v", res)
	}

	// Update: an edit on the PDS replaces the body in place.
	n.pdsText(carol, rk, "hello, edited")
	if res := td.notify(t, postURI(carol, rk)); !slices.Equal(res.Indexed, []string{postURI(carol, rk)}) {
		t.Fatalf("update: %+v", res)
	}
	if got := td.texts(t, alice); !slices.Equal(got, []string{"hello, edited"}) {
		t.Fatalf("alice after notified update = %v", got)
	}

	// The stream then delivers the create: no second item.
	now := time.Now().UnixMicro()
	n.js.Append(jetstreamtest.Post(carol, rk, now, "hello, edited"))
	td.waitCursor(t, now)
	if got := td.feed(t, alice); !slices.Equal(got, []string{rk}) {
		t.Fatalf("alice after the stream caught up = %v", got)
	}

	// Delete: the PDS no longer has it.
	n.pds.DeleteRecord(syntax.DID(carol), postNSID, syntax.RecordKey(rk))
	res = td.notify(t, postURI(carol, rk))
	if !slices.Equal(res.Deleted, []string{postURI(carol, rk)}) || len(res.Indexed)+len(res.Errors) != 0 {
		t.Fatalf("delete: %+v", res)
	}
	if got := td.feed(t, alice); len(got) != 0 {
		t.Fatalf("alice after notified delete = %v", got)
	}

	// Per-URI failures, in one call with a success: an author PLC does not
	// know, a PDS that fails, an account nobody here follows, a URI that is
	// not a record's, a collection no feed uses.
	n.pds.FailN(syntax.DID(dave), postNSID, pdstest.FaultStatus500, 1)
	rk2 := rkeyAt(time.Now().Add(time.Second))
	n.pdsText(carol, rk2, "second")
	res = td.notify(t,
		postURI(ghost, "3kghostpost22"),
		postURI(dave, "3kdavepost222"),
		postURI(stranger, "3kstrangepost"),
		"at://"+carol,
		"at://"+carol+"/app.bsky.feed.like/3klike2222222",
		"at://carol.test/app.bsky.feed.post/3khandle22222",
		postURI(carol, rk2),
	)
	if !slices.Equal(res.Indexed, []string{postURI(carol, rk2)}) {
		t.Errorf("indexed = %v", res.Indexed)
	}
	want := map[string]string{
		postURI(ghost, "3kghostpost22"):                       xrpc.NotifyErrAccountNotFound,
		postURI(dave, "3kdavepost222"):                        xrpc.NotifyErrUpstreamFailure,
		postURI(stranger, "3kstrangepost"):                    xrpc.NotifyErrNotInScope,
		"at://" + carol:                                       xrpc.NotifyErrInvalidURI,
		"at://" + carol + "/app.bsky.feed.like/3klike2222222": xrpc.NotifyErrUnsupportedCollection,
		"at://carol.test/app.bsky.feed.post/3khandle22222":    xrpc.NotifyErrInvalidURI,
	}
	if got := errorNames(res); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("errors = %v\nwant %v", got, want)
	}
	if got := td.texts(t, alice); !slices.Equal(got, []string{"second"}) {
		t.Errorf("alice after the mixed call = %v", got)
	}

	// Whole-call refusals.
	body := fmt.Sprintf(`{"uri":%q}`, postURI(carol, rk2))
	for _, tc := range []struct {
		name, secret, body string
		status             int
		errName            string
	}{
		{"no secret", "", body, 401, "AuthenticationRequired"},
		{"bad secret", "not-the-secret-at-all", body, 401, "AuthenticationRequired"},
		{"too many", testNotifySecret, manyURIs(carol, 26), 400, "InvalidRequest"},
		{"bad json", testNotifySecret, `{"uris":`, 400, "InvalidRequest"},
	} {
		status, b := td.notifyCall(t, tc.secret, tc.body)
		if status != tc.status || !strings.Contains(string(b), `"error":"`+tc.errName+`"`) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, status, b, tc.status, tc.errName)
		}
	}

	m := td.metrics(t)
	for _, want := range []string{
		`appview_notify_records_total{outcome="written"} 3`,
		`appview_notify_records_total{outcome="unchanged"} 1`,
		`appview_notify_records_total{outcome="deleted"} 1`,
		`appview_notify_records_total{outcome="account_not_found"} 1`,
		`appview_xrpc_requests_total{method="notifyOfUpdate",status="401"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func manyURIs(author string, n int) string {
	var uris []string
	for i := range n {
		uris = append(uris, fmt.Sprintf("%q", postURI(author, fmt.Sprintf("3kmany%07d", i))))
	}
	return `{"uris":[` + strings.Join(uris, ",") + `]}`
}

func TestNotifyOfUpdateDisabled(t *testing.T) {
	n := newNetwork(t)
	carol := n.account("carol")
	td := startDaemon(t, n.js, n.config(t)) // notify is off by default
	status, b := td.notifyCall(t, testNotifySecret, fmt.Sprintf(`{"uri":%q}`, postURI(carol, "3kpost2222222")))
	if status != http.StatusNotImplemented || !strings.Contains(string(b), `"error":"MethodNotImplemented"`) {
		t.Fatalf("disabled: %d %s", status, b)
	}
	if n.pds.TotalRequests() != 0 {
		t.Error("a disabled notifyOfUpdate reached the PDS")
	}
}

func TestNotifyConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Notify.Enabled = true
	cfg.Notify.Secret = "short"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "notify.secret: must be at least 16 characters") {
		t.Fatalf("short secret: %v", err)
	}
	cfg.Notify.Secret = testNotifySecret
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	out, err := cfg.MarshalRedactedYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), testNotifySecret) || !strings.Contains(string(out), "secret: "+Redacted) {
		t.Errorf("secret not redacted:\n%s", out)
	}
}

// A secret with whitespace around it (a YAML block scalar's newline, an
// environment variable's) passed validation, yet no caller could send it:
// the bearer token is trimmed before it is compared. It is refused, from
// the file and from the environment alike, naming the key but not the
// secret.
func TestNotifySecretWithSurroundingSpaceIsRefused(t *testing.T) {
	const want = "notify.secret: must not begin or end with whitespace"
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), testNotifySecret) {
			t.Errorf("%s: error %v, want one containing %q, without the secret", what, err, want)
		}
	}
	cfg := DefaultConfig()
	cfg.Notify = NotifyConfig{Enabled: true, Secret: " " + testNotifySecret}
	check("leading space", cfg.Validate())

	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "notify:\n  enabled: true\n  secret: |\n    " + testNotifySecret + "\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadConfig(path)
	check("block scalar", err)

	_, err = LoadConfigEnv("", []string{"APPVIEW_NOTIFY_ENABLED=true", "APPVIEW_NOTIFY_SECRET=" + testNotifySecret + "\n"})
	check("environment", err)
	if err != nil && !strings.Contains(err.Error(), "APPVIEW_NOTIFY_SECRET") {
		t.Errorf("environment: error %v does not name the variable", err)
	}

	// Whitespace inside the secret can be sent, and is kept.
	cfg.Notify.Secret = "a secret with spaces inside"
	if err := cfg.Validate(); err != nil {
		t.Errorf("inner spaces: %v", err)
	}
}

// A notifyOfUpdate call's write is urgent (feeds.Urgent): its caller waits
// on it, so it asks a catch-up's open batch, which holds the write lock,
// to make way, and is applied once the batch lets go.
func TestANotifiedWriteAsksACatchUpBatchToMakeWay(t *testing.T) {
	n := newNetwork(t)
	alice, carol := n.account("alice"), n.account("carol")
	n.pdsFollow(alice, carol, "3kfollowcarol")
	cfg := n.config(t)
	cfg.Notify = NotifyConfig{Enabled: true, Secret: testNotifySecret}
	td := startDaemon(t, n.js, cfg)
	td.feed(t, alice) // the first read: alice is a viewer
	rk := rkeyAt(time.Now())
	n.pdsText(carol, rk, "hello")

	open, err := td.Store().BeginBatch(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string][]string{"uris": {postURI(carol, rk)}})
	type answer struct {
		status int
		body   []byte
	}
	done := make(chan answer, 1)
	go func() {
		status, body := td.notifyCall(t, testNotifySecret, string(body))
		done <- answer{status, body}
	}()
	for deadline := time.Now().Add(10 * time.Second); !td.Store().WriterWanted(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			open.Rollback()
			t.Fatal("the notified write did not ask the open batch to make way")
		}
	}
	open.Rollback()
	a := <-done
	var res xrpc.NotifyResult
	if err := json.Unmarshal(a.body, &res); err != nil || a.status != http.StatusOK || !slices.Equal(res.Indexed, []string{postURI(carol, rk)}) {
		t.Fatalf("notify: %d %s", a.status, a.body)
	}
}
