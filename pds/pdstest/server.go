// Package pdstest runs a fake PDS on loopback for tests. It serves
// com.atproto.repo.listRecords and getRecord the way the reference PDS does
// (newest record key first; every non-empty page carries a cursor, an empty
// page none; an unknown repo is 400 InvalidRequest "Could not find repo"),
// counts requests per (repo, collection), and injects faults on demand.
package pdstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Fault is a misbehaviour to inject.
type Fault int

const (
	// FaultNone clears a fault.
	FaultNone Fault = iota
	// FaultStatus500 answers 500 InternalServerError.
	FaultStatus500
	// FaultRateLimited answers 429 RateLimitExceeded with Retry-After: 7.
	FaultRateLimited
	// FaultHang never answers; the request is released when its context
	// ends (client timeout) or the server closes.
	FaultHang
	// FaultTruncated declares the full length of a valid answer and sends
	// half of it.
	FaultTruncated
	// FaultRepeatCursor answers a page whose cursor is the one the request
	// carried, so a naive client loops forever.
	FaultRepeatCursor
	// FaultHugeBody answers 200 with a 10 MB JSON body of undeclared length.
	FaultHugeBody
	// FaultRepoDeactivated answers 400 RepoDeactivated.
	FaultRepoDeactivated
	// FaultRepoTakendown answers 400 RepoTakendown.
	FaultRepoTakendown
	// FaultWrongContentType answers a valid page as text/html.
	FaultWrongContentType
	// FaultSlowBody sends a valid page one byte every 10ms.
	FaultSlowBody
	// FaultBadCursor answers 400 InvalidRequest to a request with a cursor.
	FaultBadCursor
	// FaultBadJSON answers 200 with a body that is not JSON.
	FaultBadJSON
	// FaultDelayed answers normally, but only after Delay.
	FaultDelayed
	// FaultOverLimit lists up to twice the records asked for, its cursor
	// after the limit-th, as a PDS that ignores the limit.
	FaultOverLimit
	// FaultCircleCursor pages in circles: every page is the first page,
	// its cursor "A", or "B" when the request sent "A".
	FaultCircleCursor
)

// Delay is how long a FaultDelayed answer waits, unless SetDelay says.
const Delay = 500 * time.Millisecond

// HugeBodyBytes is the size of a FaultHugeBody answer.
const HugeBodyBytes = 10 << 20

type key struct {
	did        syntax.DID
	collection syntax.NSID
}

type fault struct {
	fault Fault
	left  int // remaining requests; <0 means until cleared
}

type record struct {
	cid   string
	value json.RawMessage
}

// Server is a fake PDS. Its methods are safe for concurrent use.
type Server struct {
	srv    *httptest.Server
	closed chan struct{}

	mu       sync.Mutex
	repos    map[syntax.DID]map[syntax.NSID]map[syntax.RecordKey]record
	faults   map[key]*fault
	requests map[key]int
	total    int
	latency  time.Duration
	delay    time.Duration // of a FaultDelayed answer; 0: Delay
}

// NewServer starts a fake PDS on 127.0.0.1. Close it when done.
func NewServer() *Server {
	s := &Server{
		closed:   make(chan struct{}),
		repos:    make(map[syntax.DID]map[syntax.NSID]map[syntax.RecordKey]record),
		faults:   make(map[key]*fault),
		requests: make(map[key]int),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /xrpc/com.atproto.repo.listRecords", s.listRecords)
	mux.HandleFunc("GET /xrpc/com.atproto.repo.getRecord", s.getRecord)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "MethodNotImplemented", "Method Not Implemented")
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL is the PDS endpoint, as a DID document would name it.
func (s *Server) URL() string { return s.srv.URL }

// Close releases hanging requests and stops the server.
func (s *Server) Close() {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// AddRepo makes did a known, possibly empty, repo.
func (s *Server) AddRepo(did syntax.DID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repos[did] == nil {
		s.repos[did] = make(map[syntax.NSID]map[syntax.RecordKey]record)
	}
}

// AddRecord stores value (raw JSON, served as is) at did/collection/rkey,
// replacing any record there, and returns its CID.
func (s *Server) AddRecord(did syntax.DID, collection syntax.NSID, rkey syntax.RecordKey, value string) string {
	cid := FakeCID([]byte(value))
	s.AddRecordCID(did, collection, rkey, value, cid)
	return cid
}

// AddRecordCID is AddRecord with the CID given: the one a generated
// Jetstream log gave the record's last write, so that a listing and the
// stream agree on it.
func (s *Server) AddRecordCID(did syntax.DID, collection syntax.NSID, rkey syntax.RecordKey, value, cid string) {
	s.AddRepo(did)
	s.mu.Lock()
	defer s.mu.Unlock()
	coll := s.repos[did][collection]
	if coll == nil {
		coll = make(map[syntax.RecordKey]record)
		s.repos[did][collection] = coll
	}
	coll[rkey] = record{cid: cid, value: json.RawMessage(value)}
}

// DeleteRepo removes did's repo, as a deleted account's PDS does: it is
// then answered "Could not find repo".
func (s *Server) DeleteRepo(did syntax.DID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.repos, did)
}

// DeleteRecord removes did/collection/rkey if present.
func (s *Server) DeleteRecord(did syntax.DID, collection syntax.NSID, rkey syntax.RecordKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.repos[did][collection], rkey)
}

// Fail injects f into every request for (did, collection) until cleared
// with FaultNone. An empty collection means every collection of did.
func (s *Server) Fail(did syntax.DID, collection syntax.NSID, f Fault) {
	s.FailN(did, collection, f, -1)
}

// FailN injects f into the next n requests for (did, collection) only.
func (s *Server) FailN(did syntax.DID, collection syntax.NSID, f Fault, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{did, collection}
	if f == FaultNone || n == 0 {
		delete(s.faults, k)
		return
	}
	s.faults[k] = &fault{fault: f, left: n}
}

// Requests is the number of requests served for (did, collection).
func (s *Server) Requests(did syntax.DID, collection syntax.NSID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[key{did, collection}]
}

// TotalRequests is the number of listRecords and getRecord requests served.
func (s *Server) TotalRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// FakeCID returns a well-formed CIDv1 (dag-cbor, sha-256) of b, as the
// real thing would look; it is not the CID of any real encoding.
func FakeCID(b []byte) string {
	sum := sha256.Sum256(b)
	raw := append([]byte{0x01, 0x71, 0x12, 0x20}, sum[:]...)
	return "b" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw))
}

// SetLatency makes every later listRecords answer wait d first, as a PDS
// across a network does: a first read then spreads its pages over time
// instead of writing them back to back.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// SetDelay makes later FaultDelayed answers wait d instead of Delay: a
// test that must tell "did not wait for the slow PDS" from scheduling
// noise on a loaded machine gives the PDS seconds, not half of one.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

func (s *Server) delayed() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delay > 0 {
		return s.delay
	}
	return Delay
}

// wait sleeps the server's latency or until the request ends.
func (s *Server) wait(r *http.Request) {
	s.mu.Lock()
	d := s.latency
	s.mu.Unlock()
	if d <= 0 {
		return
	}
	select {
	case <-r.Context().Done():
	case <-s.closed:
	case <-time.After(d):
	}
}

// begin counts the request and returns the fault to inject, if any.
func (s *Server) begin(did syntax.DID, collection syntax.NSID) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	s.requests[key{did, collection}]++
	for _, k := range []key{{did, collection}, {did, ""}} {
		f, ok := s.faults[k]
		if !ok {
			continue
		}
		if f.left > 0 {
			if f.left--; f.left == 0 {
				delete(s.faults, k)
			}
		}
		return f.fault
	}
	return FaultNone
}

func (s *Server) listRecords(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	did, collection, cursor := syntax.DID(q.Get("repo")), syntax.NSID(q.Get("collection")), q.Get("cursor")
	s.wait(r)
	f := s.begin(did, collection)
	if s.injectEarly(w, r, f, cursor != "") {
		return
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "InvalidRequest", "limit must be an integer in 1..100")
			return
		}
		limit = n
	}
	if _, err := syntax.ParseNSID(collection.String()); err != nil {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "Error: Params must have the property \"collection\"")
		return
	}
	reverse := q.Get("reverse") == "true"

	s.mu.Lock()
	repo, known := s.repos[did]
	var rkeys []syntax.RecordKey
	recs := repo[collection]
	for rk := range recs {
		rkeys = append(rkeys, rk)
	}
	slices.Sort(rkeys)
	if !reverse {
		slices.Reverse(rkeys)
	}
	// Values are spliced in raw, so a record stored with broken JSON breaks
	// the page as it would on a broken PDS.
	var items [][]byte
	next := ""
	most := limit
	if f == FaultOverLimit {
		most = 2 * limit
	}
	for _, rk := range rkeys {
		if cursor != "" && f != FaultCircleCursor && ((!reverse && rk.String() >= cursor) || (reverse && rk.String() <= cursor)) {
			continue
		}
		if len(items) == most {
			break
		}
		rec := recs[rk]
		items = append(items, recordJSON(recordURI(did, collection, rk), rec.cid, rec.value))
		if len(items) <= limit {
			next = rk.String()
		}
	}
	s.mu.Unlock()
	if !known {
		writeError(w, http.StatusBadRequest, "InvalidRequest", "Could not find repo: "+did.String())
		return
	}
	if f == FaultRepeatCursor && cursor != "" {
		next = cursor
	}
	if f == FaultCircleCursor {
		next = "A"
		if cursor == "A" {
			next = "B"
		}
	}
	body := []byte(`{"records":[`)
	body = append(body, bytes.Join(items, []byte(","))...)
	body = append(body, ']')
	if next != "" {
		c, _ := json.Marshal(next)
		body = append(append(body, `,"cursor":`...), c...)
	}
	body = append(body, '}')
	s.writeBody(w, r, f, body)
}

func (s *Server) getRecord(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	did, collection, rkey := syntax.DID(q.Get("repo")), syntax.NSID(q.Get("collection")), syntax.RecordKey(q.Get("rkey"))
	f := s.begin(did, collection)
	if s.injectEarly(w, r, f, false) {
		return
	}
	s.mu.Lock()
	repo, known := s.repos[did]
	rec, found := repo[collection][rkey]
	s.mu.Unlock()
	uri := recordURI(did, collection, rkey)
	switch {
	case !known:
		writeError(w, http.StatusBadRequest, "InvalidRequest", "Could not find repo: "+did.String())
		return
	case !found:
		writeError(w, http.StatusBadRequest, "RecordNotFound", "Could not locate record: "+uri)
		return
	}
	body := recordJSON(uri, rec.cid, rec.value)
	s.writeBody(w, r, f, body)
}

// injectEarly answers faults that replace the whole answer. It reports
// whether it answered.
func (s *Server) injectEarly(w http.ResponseWriter, r *http.Request, f Fault, hasCursor bool) bool {
	switch f {
	case FaultStatus500:
		writeError(w, http.StatusInternalServerError, "InternalServerError", "Internal Server Error")
	case FaultRateLimited:
		w.Header().Set("Retry-After", "7")
		w.Header().Set("RateLimit-Limit", "3000")
		w.Header().Set("RateLimit-Remaining", "0")
		writeError(w, http.StatusTooManyRequests, "RateLimitExceeded", "Rate Limit Exceeded")
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
	case FaultDelayed:
		select {
		case <-time.After(s.delayed()):
		case <-r.Context().Done():
		case <-s.closed:
		}
		return false
	case FaultRepoDeactivated:
		writeError(w, http.StatusBadRequest, "RepoDeactivated", "Repo has been deactivated")
	case FaultRepoTakendown:
		writeError(w, http.StatusBadRequest, "RepoTakendown", "Repo has been takendown")
	case FaultBadCursor:
		if !hasCursor {
			return false
		}
		writeError(w, http.StatusBadRequest, "InvalidRequest", "Malformed cursor")
	case FaultBadJSON:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write([]byte(`{"records":[{"uri":`))
		w.Write([]byte("<html>oops</html>"))
	case FaultHugeBody:
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		// No Content-Length: the client has to notice while reading.
		const head, tail = `{"records":[],"cursor":"`, `"}`
		w.Write([]byte(head))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for left := HugeBodyBytes - len(head) - len(tail); left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return true
			}
		}
		w.Write([]byte(tail))
	default:
		return false
	}
	return true
}

// writeBody writes a 200 answer, mangled by the body faults.
func (s *Server) writeBody(w http.ResponseWriter, r *http.Request, f Fault, body []byte) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	switch f {
	case FaultWrongContentType:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(body)
	case FaultTruncated:
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body[:len(body)/2])
		// Returning short of Content-Length makes net/http drop the
		// connection: the client sees an unexpected EOF.
	case FaultSlowBody:
		w.WriteHeader(http.StatusOK)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := range body {
			if _, err := w.Write(body[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-s.closed:
				return
			case <-tick.C:
			}
		}
	default:
		w.Write(body)
	}
}

func writeError(w http.ResponseWriter, status int, name, message string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": name, "message": message})
}

func recordURI(did syntax.DID, collection syntax.NSID, rkey syntax.RecordKey) string {
	return "at://" + did.String() + "/" + collection.String() + "/" + rkey.String()
}

// recordJSON renders {"uri","cid","value"} with value spliced in raw.
func recordJSON(uri, cid string, value json.RawMessage) []byte {
	u, _ := json.Marshal(uri)
	c, _ := json.Marshal(cid)
	b := append([]byte(`{"uri":`), u...)
	b = append(append(b, `,"cid":`...), c...)
	b = append(append(b, `,"value":`...), value...)
	return append(b, '}')
}

// NewNotAPDS starts a host that answers every request with 404
// MethodNotImplemented, as a server that is not a PDS (or one without the
// method) does: it says nothing about any record or repo. Close it when
// done.
func NewNotAPDS() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "MethodNotImplemented", "Method Not Implemented")
	}))
}
