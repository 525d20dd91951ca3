package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Options configures NewClient. The zero value is a safe client.
type Options struct {
	// AllowPrivateNetworks lets the client reach loopback, private and
	// link-local addresses (local development networks and tests).
	AllowPrivateNetworks bool
	// Timeout bounds a whole exchange, body included (default 10s), so a
	// server that answers byte by byte is cut off.
	Timeout time.Duration
	// MaxRedirects is how many redirects are followed (default 3; negative
	// means none).
	MaxRedirects int
	// UserAgent is sent on requests that set none.
	UserAgent string
}

const (
	defaultTimeout      = 10 * time.Second
	defaultMaxRedirects = 3
	maxHeaderBytes      = 64 << 10
)

// ErrTooLarge is returned by ReadBody when the body exceeds its limit.
var ErrTooLarge = errors.New("egress: body too large")

// NewClient returns an *http.Client for untrusted destinations.
func NewClient(opts Options) *http.Client {
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.MaxRedirects == 0 {
		opts.MaxRedirects = defaultMaxRedirects
	}
	dialer := &net.Dialer{
		Timeout:   opts.Timeout,
		KeepAlive: 30 * time.Second,
	}
	if !opts.AllowPrivateNetworks {
		dialer.ControlContext = controlAddr
	}
	transport := &http.Transport{
		// No Proxy: with one, the checked address would be the proxy's.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    opts.Timeout,
		ResponseHeaderTimeout:  opts.Timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	return &http.Client{
		Transport:     &roundTripper{next: transport, userAgent: opts.UserAgent},
		Timeout:       opts.Timeout,
		CheckRedirect: checkRedirect(opts.MaxRedirects),
	}
}

// controlAddr runs after DNS resolution and before connect(2), on the exact
// address the socket will use.
func controlAddr(_ context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &ForbiddenError{Host: address, Reason: "not an IP address"}
	}
	if reason := forbiddenReason(ap.Addr()); reason != "" {
		return &ForbiddenError{Host: address, Addr: ap.Addr(), Reason: reason}
	}
	return nil
}

func checkRedirect(max int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if max < 0 || len(via) > max {
			return fmt.Errorf("egress: stopped after %d redirects", len(via)-1)
		}
		if err := checkScheme(req.URL.Scheme); err != nil {
			return err
		}
		// An https exchange must not be downgraded by whoever answered it.
		if prev := via[len(via)-1]; prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("egress: refused redirect from https to %s", req.URL.Scheme)
		}
		return nil
	}
}

func checkScheme(scheme string) error {
	if scheme != "http" && scheme != "https" {
		return fmt.Errorf("egress: refused URL scheme %q", scheme)
	}
	return nil
}

// roundTripper refuses non-http(s) URLs and sets the User-Agent.
type roundTripper struct {
	next      http.RoundTripper
	userAgent string
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := checkScheme(req.URL.Scheme); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if rt.userAgent != "" && req.Header.Get("User-Agent") == "" {
		req = req.Clone(req.Context())
		req.Header.Set("User-Agent", rt.userAgent)
	}
	return rt.next.RoundTrip(req)
}

// ReadBody reads r to its end, failing with ErrTooLarge as soon as more than
// max bytes arrive; it never holds more than max+1 bytes.
func ReadBody(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max)
	}
	return b, nil
}
