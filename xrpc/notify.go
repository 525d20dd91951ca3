package xrpc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/labstack/echo/v4"
)

// Notifier fetches records from their authors' PDSes and applies them as
// the stream would. The appview package implements it.
type Notifier interface {
	// NotifyOfUpdate handles at most MaxNotifyURIs distinct, parsed URIs.
	// Per-URI failures go in the result; an error means the daemon's own
	// state failed (the database write) and is a 500, unless it is
	// ErrNotifyBusy, a 503.
	NotifyOfUpdate(ctx context.Context, uris []syntax.ATURI) (NotifyResult, error)
}

// ErrNotifyBusy wraps a notifier's error when the write could not be
// made in its time because the write lock was held (a long ingest batch,
// an operator command): nothing is broken, and the call may be repeated.
var ErrNotifyBusy = errors.New("the database is busy")

// NotifyResult is the output of notifyOfUpdate.
type NotifyResult struct {
	// Indexed lists the URIs whose record is stored as its PDS has it
	// (created, updated or unchanged).
	Indexed []string `json:"indexed"`
	// Deleted lists the URIs whose record the PDS no longer has, and
	// which are not stored any more.
	Deleted []string `json:"deleted"`
	// Errors lists the URIs that could not be handled, and why.
	Errors []NotifyError `json:"errors"`
}

// NotifyError is a per-URI failure. Error is one of the NotifyErr… names.
type NotifyError struct {
	URI     string `json:"uri"`
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

// The per-URI error names of notifyOfUpdate (a closed set, listed in its
// Lexicon).
const (
	// NotifyErrInvalidURI: not a record URI with a DID authority.
	NotifyErrInvalidURI = "InvalidUri"
	// NotifyErrUnsupportedCollection: no configured feed uses the collection.
	NotifyErrUnsupportedCollection = "UnsupportedCollection"
	// NotifyErrNotInScope: no viewer follows the author of a target record,
	// or the author of a follow record is not a viewer.
	NotifyErrNotInScope = "NotInScope"
	// NotifyErrAccountNotFound: the DID does not resolve, or its PDS does
	// not host the repo (or it is deactivated, taken down, suspended).
	NotifyErrAccountNotFound = "AccountNotFound"
	// NotifyErrInvalidRecord: the PDS answered with a record the appview
	// cannot use (wrong $type, a follow without a DID subject, bad JSON).
	NotifyErrInvalidRecord = "InvalidRecord"
	// NotifyErrUpstreamFailure: the PDS or the identity directory could
	// not be reached, failed, timed out or rate-limited us: try again later.
	NotifyErrUpstreamFailure = "UpstreamFailure"
)

const (
	notifyName = "notifyOfUpdate"
	// routeNotify labels notifyOfUpdate requests in the metrics.
	routeNotify route = notifyName
	// MaxNotifyURIs bounds the URIs of one notifyOfUpdate call.
	MaxNotifyURIs = 25
	// maxNotifyBody caps the request body: 25 URIs of the longest valid
	// DID, NSID and record key, JSON-escaped, fit in well under it.
	maxNotifyBody = 256 << 10
)

// notifyMethod serves POST /xrpc/<ns>.notifyOfUpdate. A nil *notifyMethod
// (the method is disabled) is answered as an unknown method.
type notifyMethod struct {
	path     string
	notifier Notifier
	// secretHash is the SHA-256 of the bearer secret: comparing digests in
	// constant time leaks neither the secret nor its length.
	secretHash [sha256.Size]byte
}

func newNotifyMethod(cfg Config) *notifyMethod {
	if cfg.Notify == nil {
		return nil
	}
	return &notifyMethod{
		path:       xrpcPrefix + cfg.Namespace + "." + notifyName,
		notifier:   cfg.Notify,
		secretHash: sha256.Sum256([]byte(cfg.NotifySecret)),
	}
}

// validateNotify is Config.Validate's part for notifyOfUpdate.
func (cfg Config) validateNotify() error {
	if cfg.Notify != nil && cfg.NotifySecret == "" {
		return errors.New("notify_secret: must be set when notify is")
	}
	if cfg.Notify != nil && cfg.NotifySecret != strings.TrimSpace(cfg.NotifySecret) {
		// authenticate trims the token it is sent: such a secret could
		// never be matched (TestNotifySecretWithSurroundingSpaceIsRefused).
		return errors.New("notify_secret: must not begin or end with whitespace: a caller's bearer token is read without it, so no call could match")
	}
	return nil
}

// matches reports whether path is the method's; false when disabled.
func (m *notifyMethod) matches(path string) bool { return m != nil && path == m.path }

// serve checks, in order: the HTTP method, the bearer secret, the body.
// Only then are the URIs handed to the notifier.
func (m *notifyMethod) serve(c echo.Context) error {
	r := c.Request()
	if r.Method != http.MethodPost {
		c.Response().Header().Set(echo.HeaderAllow, http.MethodPost)
		return &Error{Status: http.StatusMethodNotAllowed, Name: "MethodNotAllowed", Message: "XRPC procedures must use POST"}
	}
	if err := m.authenticate(r); err != nil {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="notifyOfUpdate"`)
		return err
	}
	uris, xerr := parseNotifyBody(r)
	if xerr != nil {
		return xerr
	}
	res, err := m.notifier.NotifyOfUpdate(r.Context(), uris)
	if errors.Is(err, ErrNotifyBusy) {
		return notEnoughResources(c, "1", "the database is busy")
	}
	if err != nil {
		return fmt.Errorf("notifyOfUpdate: %w", err)
	}
	// Empty lists, never null: the Lexicon requires the three arrays.
	for _, l := range []*[]string{&res.Indexed, &res.Deleted} {
		if *l == nil {
			*l = []string{}
		}
	}
	if res.Errors == nil {
		res.Errors = []NotifyError{}
	}
	return writeJSON(c, http.StatusOK, res)
}

func (m *notifyMethod) authenticate(r *http.Request) *Error {
	auth := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(auth, " ")
	if auth == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return &Error{Status: http.StatusUnauthorized, Name: "AuthenticationRequired", Message: "a bearer secret is required"}
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], m.secretHash[:]) != 1 {
		return &Error{Status: http.StatusUnauthorized, Name: "AuthenticationRequired", Message: "invalid bearer secret"}
	}
	return nil
}

// parseNotifyBody reads {"uri":…} and/or {"uris":[…]}: at least one and at
// most MaxNotifyURIs at-uris in all, duplicates dropped. Other fields are
// ignored, as Lexicon objects may grow.
func parseNotifyBody(r *http.Request) ([]syntax.ATURI, *Error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, invalidRequest("the body must be application/json")
	}
	raw, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxNotifyBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &Error{Status: http.StatusRequestEntityTooLarge, Name: "PayloadTooLarge",
				Message: fmt.Sprintf("the body exceeds %d bytes", maxNotifyBody)}
		}
		return nil, invalidRequest("could not read the body")
	}
	var in struct {
		URI  *string  `json:"uri"`
		URIs []string `json:"uris"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&in); err != nil || bytes.TrimSpace(raw)[0] != '{' {
		return nil, invalidRequest("the body must be a JSON object with uri (a string) or uris (an array of strings)")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalidRequest("the body must hold one JSON object")
	}
	all := in.URIs
	if in.URI != nil {
		all = append([]string{*in.URI}, all...)
	}
	if len(all) == 0 {
		return nil, invalidRequest("uri or uris is required")
	}
	seen := make(map[syntax.ATURI]bool, len(all))
	out := make([]syntax.ATURI, 0, len(all))
	for i, s := range all {
		u, err := syntax.ParseATURI(s)
		if err != nil {
			return nil, invalidRequest(fmt.Sprintf("URI %d is not an at-uri", i+1))
		}
		if seen[u] {
			continue // the Lexicon: repeated URIs count once (TestNotifyRepeatedURIsCountOnce)
		}
		if len(out) == MaxNotifyURIs {
			return nil, invalidRequest(fmt.Sprintf("at most %d distinct URIs per call", MaxNotifyURIs))
		}
		seen[u] = true
		out = append(out, u)
	}
	return out, nil
}
