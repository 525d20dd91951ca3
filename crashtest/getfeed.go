package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// FeedName is the feed the crash daemons serve (ConfigYAML).
const FeedName = "all"

// ConfigYAML is the daemon's feed configuration: one feed whose cap and
// merge limit are above anything a crash log holds, so a feed is exactly
// "every live post of every account followed" and the model needs no
// notion of trimming.
const ConfigYAML = `feeds:
  - name: all
    follow_collection: app.bsky.graph.follow
    merge_limit: 1000000
    targets:
      - collection: app.bsky.feed.post
        cap: 1000000
`

type getFeedPage struct {
	Records []struct {
		URI    string `json:"uri"`
		CID    string `json:"cid"`
		DID    string `json:"did"`
		RKey   string `json:"rkey"`
		TimeUS int64  `json:"time_us"`
	} `json:"records"`
	Cursor string `json:"cursor"`
}

// CompareGetFeed reads every viewer's whole feed over getFeed, page by
// page, and checks it against the model: the same posts, none twice
// (across pages included), each with its current cid and indexed time, in
// position order. viewers are account indexes.
func CompareGetFeed(ctx context.Context, base string, m *Model, viewers []int32) (*Mismatches, int, error) {
	return compareGetFeed(ctx, base, m, viewers, true)
}

// compareGetFeed is CompareGetFeed; with streamTimes false it does not
// check indexed times, which a listing sets to the later of the record
// key's time and the stream cursor when it stored the record, not to
// when the stream carried it (LogWorld).
func compareGetFeed(ctx context.Context, base string, m *Model, viewers []int32, streamTimes bool) (*Mismatches, int, error) {
	out := newMismatches()
	var mu sync.Mutex
	var pages int
	var firstErr error
	client := &http.Client{Timeout: 30 * time.Second}
	work := make(chan int32)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for v := range work {
				items, n, err := readFeed(ctx, client, base, did(v))
				mu.Lock()
				pages += n
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
				} else {
					checkGetFeed(m, v, items, streamTimes, out)
				}
				mu.Unlock()
			}
		})
	}
	for _, v := range viewers {
		work <- v
	}
	close(work)
	wg.Wait()
	return out, pages, firstErr
}

type servedItem struct {
	did    string
	rkey   string
	cid    string
	timeUS int64
}

func readFeed(ctx context.Context, client *http.Client, base, actor string) ([]servedItem, int, error) {
	var items []servedItem
	cursor := ""
	for pages := 1; ; pages++ {
		q := url.Values{"feed": {FeedName}, "actor": {actor}, "limit": {"100"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/xrpc/com.example.appview.getFeed?"+q.Encode(), nil)
		if err != nil {
			return nil, pages, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, pages, err
		}
		var page getFeedPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, pages, fmt.Errorf("getFeed %s: status %d", actor, resp.StatusCode)
		}
		if err != nil {
			return nil, pages, fmt.Errorf("getFeed %s: %w", actor, err)
		}
		for _, r := range page.Records {
			items = append(items, servedItem{did: r.DID, rkey: r.RKey, cid: r.CID, timeUS: r.TimeUS})
			if want := "at://" + r.DID + "/app.bsky.feed.post/" + r.RKey; r.URI != want {
				return nil, pages, fmt.Errorf("getFeed %s: uri %s, want %s", actor, r.URI, want)
			}
		}
		if page.Cursor == "" {
			return items, pages, nil
		}
		if len(page.Records) == 0 {
			return nil, pages, fmt.Errorf("getFeed %s: empty page with a cursor", actor)
		}
		cursor = page.Cursor
	}
}

func checkGetFeed(m *Model, v int32, items []servedItem, streamTimes bool, out *Mismatches) {
	want := m.Feed(v)
	seen := make(map[key]bool, len(items))
	var lastSort int64 = 1<<63 - 1
	for _, it := range items {
		a, ok := m.accounts[it.did]
		if !ok {
			out.add("getFeed: unknown author", "viewer %s: %s", did(v), it.did)
			continue
		}
		k := key{a, it.rkey}
		if seen[k] {
			out.add("getFeed: item served twice", "viewer %s: %s/%s", did(v), it.did, it.rkey)
			continue
		}
		seen[k] = true
		p, ok := want[k]
		if !ok {
			explainExtra(m, v, k, out)
			continue
		}
		if it.cid != p.cid {
			out.add("getFeed: stale cid (update lost)", "viewer %s: %s/%s cid %s, want %s", did(v), it.did, it.rkey, it.cid, p.cid)
		}
		if streamTimes && it.timeUS != p.indexedUS {
			out.add("getFeed: time_us differs", "viewer %s: %s/%s %d, want %d", did(v), it.did, it.rkey, it.timeUS, p.indexedUS)
		}
		if p.sortUS > lastSort {
			out.add("getFeed: out of order", "viewer %s: %s/%s", did(v), it.did, it.rkey)
		}
		lastSort = p.sortUS
	}
	for k := range want {
		if !seen[k] {
			out.add("getFeed: item lost", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
		}
	}
}
