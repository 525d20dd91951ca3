// Package plctest runs a fake PLC directory on loopback for tests: it serves
// DID documents shaped like plc.directory's and answers
// com.atproto.identity.resolveHandle for the handles it knows, so one server
// can stand in for both the PLC directory and a handle resolver.
package plctest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Server is a fake PLC directory. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu          sync.Mutex
	docs        map[syntax.DID][]byte
	gone        map[syntax.DID]bool
	handles     map[syntax.Handle]syntax.DID
	contentType string
	docRequests map[syntax.DID]int
	total       int
	failHandles int
	handleReqs  int
	block       chan struct{} // when set, document requests wait on it
	// limitDocs document requests still to answer 429 with
	// limitRetryAfter as their Retry-After.
	limitDocs       int
	limitRetryAfter string
}

// NewServer starts a fake PLC directory on 127.0.0.1. Close it when done.
func NewServer() *Server {
	s := &Server{
		docs:        make(map[syntax.DID][]byte),
		gone:        make(map[syntax.DID]bool),
		handles:     make(map[syntax.Handle]syntax.DID),
		docRequests: make(map[syntax.DID]int),
		contentType: "application/did+ld+json; charset=utf-8",
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// URL is the base URL, usable as both PLC URL and handle resolver URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *Server) Close() {
	s.Release()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Add registers did with a document claiming handle (none if empty) and
// naming pdsURL as its #atproto_pds, and makes handle resolve to did.
func (s *Server) Add(did syntax.DID, handle syntax.Handle, pdsURL string) {
	s.SetDocument(did, Document(did, handle, pdsURL))
	if handle != "" {
		s.SetHandle(handle, did)
	}
}

// Document renders a DID document shaped like plc.directory's.
func Document(did syntax.DID, handle syntax.Handle, pdsURL string) []byte {
	aka := []string{}
	if handle != "" {
		aka = append(aka, "at://"+handle.String())
	}
	doc := map[string]any{
		"@context": []string{
			"https://www.w3.org/ns/did/v1",
			"https://w3id.org/security/multikey/v1",
			"https://w3id.org/security/suites/secp256k1-2019/v1",
		},
		"id":          did.String(),
		"alsoKnownAs": aka,
		"verificationMethod": []map[string]string{{
			"id":                 did.String() + "#atproto",
			"type":               "Multikey",
			"controller":         did.String(),
			"publicKeyMultibase": "zQ3shXjHeiBuRCKmM36cuYnm7YEMzhGnCmCyW92sRJ9pribSF",
		}},
		"service": []map[string]string{{
			"id":              "#atproto_pds",
			"type":            "AtprotoPersonalDataServer",
			"serviceEndpoint": pdsURL,
		}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return b
}

// SetDocument serves body, whatever it is, as the document of did.
func (s *Server) SetDocument(did syntax.DID, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[did] = body
	delete(s.gone, did)
}

// SetHandle makes handle resolve to did (an empty did: to nothing) without
// touching any document, to build mismatches.
func (s *Server) SetHandle(handle syntax.Handle, did syntax.DID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if did == "" {
		delete(s.handles, handle.Normalize())
		return
	}
	s.handles[handle.Normalize()] = did
}

// Tombstone makes did answer 410 Gone, as plc.directory does for a
// tombstoned DID.
func (s *Server) Tombstone(did syntax.DID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.docs, did)
	s.gone[did] = true
}

// SetContentType changes the content type documents are served with.
func (s *Server) SetContentType(ct string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.contentType = ct
}

// Block makes document requests wait until Release (or until the client
// gives up), so tests can pile up concurrent lookups.
func (s *Server) Block() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.block == nil {
		s.block = make(chan struct{})
	}
}

// Release lets blocked document requests proceed.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.block != nil {
		close(s.block)
		s.block = nil
	}
}

// Requests is the number of DID document requests served so far.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// RequestsFor is the number of document requests for did.
func (s *Server) RequestsFor(did syntax.DID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.docRequests[did]
}

// HandleRequests is the number of resolveHandle requests served so far.
func (s *Server) HandleRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handleReqs
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/xrpc/com.atproto.identity.resolveHandle" {
		s.serveResolveHandle(w, r)
		return
	}
	did := syntax.DID(strings.TrimPrefix(r.URL.Path, "/"))
	s.mu.Lock()
	s.total++
	s.docRequests[did]++
	block := s.block
	limited, retryAfter := s.limitDocs > 0, s.limitRetryAfter
	if limited {
		s.limitDocs--
	}
	s.mu.Unlock()
	if limited {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	s.mu.Lock()
	body, ok := s.docs[did]
	gone := s.gone[did]
	ct := s.contentType
	s.mu.Unlock()
	switch {
	case gone:
		http.Error(w, "DID not available: "+did.String(), http.StatusGone)
	case !ok:
		http.Error(w, "DID not registered: "+did.String(), http.StatusNotFound)
	default:
		w.Header().Set("Content-Type", ct)
		w.Write(body)
	}
}

// LimitDocuments makes the next n document requests answer 429, with
// retryAfter as their Retry-After header when it is not empty, as the
// PLC directory does when we ask too fast.
func (s *Server) LimitDocuments(n int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limitDocs, s.limitRetryAfter = n, retryAfter
}

// FailHandles makes the next n handle resolutions answer 503, as a
// resolver that is down for a moment.
func (s *Server) FailHandles(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failHandles = n
}

func (s *Server) serveResolveHandle(w http.ResponseWriter, r *http.Request) {
	handle := syntax.Handle(strings.ToLower(r.URL.Query().Get("handle")))
	s.mu.Lock()
	s.handleReqs++
	did, ok := s.handles[handle]
	fail := s.failHandles > 0
	if fail {
		s.failHandles--
	}
	s.mu.Unlock()
	if fail {
		http.Error(w, "resolver unavailable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": "HandleNotFound", "message": "Unable to resolve handle"})
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"did": did.String()})
}
