package directory

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
	"golang.org/x/net/idna"

	"github.com/atfeeds/appview/egress"
	"github.com/atfeeds/appview/internal/textclip"
)

// document is the part of a DID document the appview uses.
type document struct {
	handle syntax.Handle // declared, not verified; empty if none
	pds    string
}

// rawDocument keeps serviceEndpoint raw: the DID spec allows maps and lists
// there, and a document with such a service for something else must not
// fail to parse.
type rawDocument struct {
	ID          string   `json:"id"`
	AlsoKnownAs []string `json:"alsoKnownAs"`
	Service     []struct {
		ID              string          `json:"id"`
		Type            string          `json:"type"`
		ServiceEndpoint json.RawMessage `json:"serviceEndpoint"`
	} `json:"service"`
}

const pdsServiceType = "AtprotoPersonalDataServer"

// parseDocument validates body as the DID document of did and extracts the
// declared handle and the PDS endpoint. Errors wrap ErrInvalidDocument or
// ErrForbiddenPDS.
func parseDocument(did syntax.DID, body []byte, allowPrivate bool) (document, error) {
	if len(body) > maxDocumentBytes {
		return document{}, fmt.Errorf("%w: larger than %d bytes", ErrInvalidDocument, maxDocumentBytes)
	}
	var raw rawDocument
	if err := json.Unmarshal(body, &raw); err != nil {
		return document{}, fmt.Errorf("%w: %v", ErrInvalidDocument, err)
	}
	if raw.ID != did.String() {
		return document{}, fmt.Errorf("%w: id %q is not %s", ErrInvalidDocument, truncate(raw.ID), did)
	}
	var doc document
	for _, aka := range raw.AlsoKnownAs {
		rest, ok := strings.CutPrefix(aka, "at://")
		if !ok {
			continue
		}
		// Only the first at:// entry counts, as in indigo; an unparsable one
		// means no handle.
		if h, err := syntax.ParseHandle(rest); err == nil && !h.IsInvalidHandle() {
			doc.handle = h.Normalize()
		}
		break
	}
	for _, svc := range raw.Service {
		if svc.ID != "#atproto_pds" && svc.ID != did.String()+"#atproto_pds" {
			continue
		}
		if svc.Type != pdsServiceType {
			return document{}, fmt.Errorf("%w: #atproto_pds has type %q", ErrInvalidDocument, truncate(svc.Type))
		}
		var endpoint string
		if err := json.Unmarshal(svc.ServiceEndpoint, &endpoint); err != nil {
			return document{}, fmt.Errorf("%w: #atproto_pds endpoint is not a string", ErrInvalidDocument)
		}
		pds, err := checkPDSURL(endpoint, allowPrivate)
		if err != nil {
			return document{}, err
		}
		doc.pds = pds
		return doc, nil
	}
	return document{}, fmt.Errorf("%w: no #atproto_pds service", ErrInvalidDocument)
}

// maxPDSURLBytes bounds a PDS endpoint. A real one is a scheme, a host
// name (at most 253 bytes) and perhaps a port; a longer one is a stranger's
// way to make every cached document, listing row and limiter key large.
const maxPDSURLBytes = 512

// checkPDSURL accepts an absolute http(s) URL of at most maxPDSURLBytes
// with a host and no credentials, query or fragment, and returns it without
// a trailing slash. Host names are checked again, on the resolved address,
// when egress connects.
func checkPDSURL(endpoint string, allowPrivate bool) (string, error) {
	if len(endpoint) > maxPDSURLBytes {
		return "", fmt.Errorf("%w: PDS endpoint %q is longer than %d bytes", ErrInvalidDocument, truncate(endpoint), maxPDSURLBytes)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w: PDS endpoint %q: %v", ErrInvalidDocument, truncate(endpoint), err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("%w: PDS endpoint %q is not http(s)", ErrInvalidDocument, truncate(endpoint))
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("%w: PDS endpoint %q has no host", ErrInvalidDocument, truncate(endpoint))
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.Opaque != "":
		return "", fmt.Errorf("%w: PDS endpoint %q is not a plain URL", ErrInvalidDocument, truncate(endpoint))
	}
	if err := canonicalHost(u); err != nil {
		return "", fmt.Errorf("%w: PDS endpoint %q: %v", ErrInvalidDocument, truncate(endpoint), err)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("%w: PDS endpoint %q has no host", ErrInvalidDocument, truncate(endpoint))
	}
	if !allowPrivate {
		if err := egress.CheckHost(u.Hostname()); err != nil {
			var ferr *egress.ForbiddenError
			reason := "forbidden"
			if errors.As(err, &ferr) {
				reason = ferr.Reason
			}
			return "", fmt.Errorf("%w: %s is %s", ErrForbiddenPDS, u.Host, reason)
		}
		// A public PDS speaks https: records fetched over http could be
		// changed by anyone on the path, and an http endpoint sent
		// requests to any port of any public host (a review found both).
		// Private networks (tests, a home lab) may use http.
		if u.Scheme != "https" {
			return "", fmt.Errorf("%w: PDS endpoint %q is not https", ErrInvalidDocument, truncate(endpoint))
		}
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// canonicalHost spells u's host one way: lower case, no trailing dot, no
// default port. The endpoint keys the per-host request limits and pauses,
// and "PDS.example.com.", "pds.example.com:443" and "pds.example.com" are
// one host to every other part of the network.
//
// A host with non-ASCII characters is taken in its IDNA ASCII form, the
// name Go's transport dials for it: "ｐｄｓ.example.com" (full-width) and
// "pds。example.com" reach pds.example.com, and kept as given each had
// slots and a pause of its own, and passed the loopback name check
// (TestPDSEndpointIsSpelledOneWayInUnicode). A host IDNA refuses is an
// error.
func canonicalHost(u *url.URL) error {
	host := u.Hostname()
	if !isASCII(host) {
		a, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return fmt.Errorf("host is not a valid internationalized name: %v", err)
		}
		host = a
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	// An IP literal and a port are spelled as netip and strconv print
	// them: "[2606:4700:0:0::1111]" and "[2606:4700::1111]",
	// "[::ffff:1.2.3.4]" and "1.2.3.4", ":08443" and ":8443" are each
	// dialled alike (TestPDSEndpointIPLiteralsAndPortsAreSpelledOneWay).
	if addr, err := netip.ParseAddr(host); err == nil {
		// A zone ("%eth0") names a link, not a host: every spelling
		// reaches the same public address (dialled with the zone
		// ignored), each with slots and a pause of its own
		// (TestPDSEndpointWithAnIPv6ZoneIsRefused).
		if addr.Zone() != "" {
			return errors.New("an IPv6 zone is not a host")
		}
		host = addr.Unmap().String()
	}
	port := u.Port()
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q out of range", truncate(port))
		}
		port = strconv.Itoa(n)
	}
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	switch {
	case port != "":
		u.Host = net.JoinHostPort(host, port)
	case strings.Contains(host, ":"):
		u.Host = "[" + host + "]" // an IPv6 literal
	default:
		u.Host = host
	}
	return nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// truncate keeps hostile strings short in error messages.
func truncate(s string) string { return textclip.Clip(s, 128) }
