//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/atfeeds/appview/jetstream/jetstreamtest"
)

// Real getFeed responses, paged with real cursors, validated against the
// Lexicon the daemon itself serves, by the reference validator
// (@atproto/lexicon on NODE_PATH). The daemon runs under a non-default
// namespace, so the served documents' substitution is checked too.
func TestGetFeedMatchesLexicon(t *testing.T) {
	node := need(t, "node")
	if out, err := exec.Command(node, "-e", "require('@atproto/lexicon')").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("@atproto/lexicon not found on NODE_PATH=%q: %s", os.Getenv("NODE_PATH"), out)
		}
		t.Skipf("@atproto/lexicon not found on NODE_PATH=%q", os.Getenv("NODE_PATH"))
	}

	const namespace = "org.example.timeline"
	js := jetstreamtest.NewServer()
	defer js.Close()
	d := startAppview(t, js, "APPVIEW_XRPC_NAMESPACE="+namespace,
		"APPVIEW_HYDRATION_PROFILES=true", "APPVIEW_HYDRATION_FETCH_WAIT=50ms")
	last := appendTimeline(js, 5)
	waitFeedNS(t, d.base, namespace, alice, 5)
	// Bob's profile, from the stream, for the profiles=true case.
	js.Append(jetstreamtest.Profile(bob, last+1, "Bob"))
	profilesURL := d.base + "/xrpc/" + namespace + ".getFeed?feed=following&profiles=true&actor=" + alice
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(string(get(t, profilesURL)), `"displayName":"Bob"`); {
		if time.Now().After(deadline) {
			t.Fatal("bob's profile not served after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	var lexicons []json.RawMessage
	for _, method := range []string{"getFeed", "notifyOfUpdate"} {
		lexicons = append(lexicons, get(t, d.base+"/lexicons/"+namespace+"."+method+".json"))
	}

	type exchange struct {
		Params map[string]any  `json:"params"`
		Output json.RawMessage `json:"output"`
	}
	var cases []exchange
	// Pages of two: every page but the last carries a cursor.
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("more pages than records")
		}
		params := map[string]any{"feed": "following", "actor": alice, "limit": 2}
		if cursor != "" {
			params["cursor"] = cursor
		}
		body := get(t, feedURL(d.base, namespace, alice, 2, cursor))
		cases = append(cases, exchange{Params: params, Output: body})
		var page feedPage
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if page.Cursor == "" {
			break
		}
		cursor = page.Cursor
	}
	cases = append(cases, exchange{Params: map[string]any{"feed": "following", "actor": alice, "profiles": true}, Output: get(t, profilesURL)})
	// An explicit collection, and a viewer with an empty feed.
	for _, params := range []map[string]any{
		{"feed": "following", "actor": alice, "collection": "app.bsky.feed.post", "limit": 100},
		{"feed": "following", "actor": bob},
	} {
		url := d.base + "/xrpc/" + namespace + ".getFeed?feed=following&actor=" + params["actor"].(string)
		if c, ok := params["collection"]; ok {
			url += "&collection=" + c.(string) + "&limit=" + strconv.Itoa(params["limit"].(int))
		}
		cases = append(cases, exchange{Params: params, Output: get(t, url)})
	}
	if len(cases) < 4 {
		t.Fatalf("only %d exchanges recorded", len(cases))
	}

	input, err := json.Marshal(map[string]any{"lexicons": lexicons, "nsid": namespace + ".getFeed", "cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	casesPath := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(casesPath, input, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, "testdata/validate_lexicon.cjs", casesPath).CombinedOutput()
	if err != nil {
		t.Fatalf("responses do not match the Lexicon: %v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(string(out)))
}
