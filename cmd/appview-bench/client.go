package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/atfeeds/appview/workload"
)

// clientResult is what the client process prints, as JSON, for the
// parent to report.
type clientResult struct {
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	Locked     int     `json:"locked"`
	Seconds    float64 `json:"seconds"`
	RPS        float64 `json:"rps"`
	P50Ms      float64 `json:"p50_ms"`
	P90Ms      float64 `json:"p90_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	MeanItems  float64 `json:"mean_items"`
	FullShare  float64 `json:"full_share"`
	FirstError string  `json:"first_error,omitempty"`
}

// rkeyField occurs once per record of a getFeed answer and never inside a
// post record, so counting it counts items without decoding the page.
var rkeyField = []byte(`"rkey":"`)

// runClient is the getFeed load generator: -read-clients workers, each
// reading the first page of a random viewer's feed in a loop over
// keep-alive connections, for -warmup and then -read-duration, measured.
func runClient(ctx context.Context, o options, out io.Writer) error {
	if o.target == "" || o.namespace == "" {
		return errors.New("client mode needs -target and -namespace")
	}
	urls := make([]string, o.viewers)
	for i := range urls {
		q := url.Values{"feed": {"following"}, "actor": {workload.AccountDID(i)}, "limit": {fmt.Sprint(o.limit)}}
		urls[i] = o.target + "/xrpc/" + o.namespace + ".getFeed?" + q.Encode()
	}
	transport := &http.Transport{MaxIdleConnsPerHost: o.readClients, DisableCompression: true}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}

	type worker struct {
		lat        []time.Duration
		items      int
		full       int
		errors     int
		locked     int
		firstError string
	}
	workers := make([]worker, o.readClients)
	measureFrom := time.Now().Add(o.warmup)
	end := measureFrom.Add(o.readDuration)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			me := &workers[w]
			r := rand.New(rand.NewPCG(o.seed, uint64(w)))
			var body bytes.Buffer
			for ctx.Err() == nil {
				start := time.Now()
				if start.After(end) {
					return
				}
				u := urls[r.IntN(len(urls))]
				status, err := get(ctx, client, u, &body)
				took := time.Since(start)
				if start.Before(measureFrom) {
					continue
				}
				me.lat = append(me.lat, took)
				if err != nil || status != http.StatusOK {
					me.errors++
					if bytes.Contains(body.Bytes(), []byte("locked")) {
						me.locked++
					}
					if me.firstError == "" {
						me.firstError = fmt.Sprintf("status %d, err %v: %.200s", status, err, body.Bytes())
					}
					continue
				}
				n := bytes.Count(body.Bytes(), rkeyField)
				me.items += n
				if n == o.limit {
					me.full++
				}
			}
		})
	}
	wg.Wait()
	transport.CloseIdleConnections()

	var res clientResult
	var lat []time.Duration
	var items, full int
	for _, w := range workers {
		lat = append(lat, w.lat...)
		items += w.items
		full += w.full
		res.Errors += w.errors
		res.Locked += w.locked
		if res.FirstError == "" {
			res.FirstError = w.firstError
		}
	}
	if len(lat) == 0 {
		return errors.New("no requests measured")
	}
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	res.Requests = len(lat)
	res.Seconds = o.readDuration.Seconds()
	res.RPS = float64(len(lat)) / res.Seconds
	res.P50Ms, res.P90Ms, res.P99Ms = ms(0.50), ms(0.90), ms(0.99)
	res.MaxMs = float64(lat[len(lat)-1].Microseconds()) / 1000
	ok := res.Requests - res.Errors
	if ok > 0 {
		res.MeanItems = float64(items) / float64(ok)
		res.FullShare = float64(full) / float64(ok)
	}
	return json.NewEncoder(out).Encode(res)
}

func get(ctx context.Context, client *http.Client, u string, body *bytes.Buffer) (int, error) {
	body.Reset()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, err = body.ReadFrom(res.Body)
	return res.StatusCode, err
}
