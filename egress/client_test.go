package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRefusedDestinations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request reached the server: %s", r.URL)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	client := NewClient(Options{Timeout: 5 * time.Second})
	for _, tc := range []struct {
		url, reason string
	}{
		{srv.URL, "loopback"},
		{"http://localhost:" + port + "/", "loopback"}, // a name that resolves to loopback
		{"http://10.0.0.1/", "private"},
		{"http://169.254.169.254/latest/meta-data/", "link-local"},
		{"http://[::1]:" + port + "/", "loopback"},
		{"http://[::ffff:127.0.0.1]:" + port + "/", "loopback"},
		{"http://100.64.0.1/", "shared address space (CGNAT)"},
		{"http://0.0.0.0:" + port + "/", "unspecified"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			start := time.Now()
			resp, err := client.Get(tc.url)
			if err == nil {
				resp.Body.Close()
				t.Fatal("request succeeded")
			}
			if !errors.Is(err, ErrForbiddenAddress) {
				t.Fatalf("error %v is not ErrForbiddenAddress", err)
			}
			var ferr *ForbiddenError
			if !errors.As(err, &ferr) || ferr.Reason != tc.reason {
				t.Fatalf("reason: got %+v, want %q", ferr, tc.reason)
			}
			// 10.0.0.1 is unroutable here: a connect attempt would hang until
			// the timeout, so a quick answer shows the refusal came first.
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("refusal took %v", d)
			}
		})
	}
}

func TestAllowPrivateNetworks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("User-Agent"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	client := NewClient(Options{AllowPrivateNetworks: true, UserAgent: "appview-test"})
	for _, u := range []string{srv.URL, "http://localhost:" + port} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		body, err := ReadBody(resp.Body, 1024)
		resp.Body.Close()
		if err != nil || string(body) != "appview-test" {
			t.Fatalf("%s: body %q, err %v", u, body, err)
		}
	}
}

func TestRefusedSchemes(t *testing.T) {
	client := NewClient(Options{AllowPrivateNetworks: true})
	for _, u := range []string{"file:///etc/passwd", "ftp://example.com/", "gopher://example.com/"} {
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: request succeeded", u)
		}
		if !strings.Contains(err.Error(), "scheme") {
			t.Fatalf("%s: unexpected error %v", u, err)
		}
	}
}

func TestRedirects(t *testing.T) {
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, "ok")
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/chain":
			n := len(r.URL.Query().Get("n"))
			if n == 2 { // the third redirect
				http.Redirect(w, r, "/ok", http.StatusFound)
				return
			}
			http.Redirect(w, r, "/chain?n="+strings.Repeat("x", n+1), http.StatusFound)
		case "/private":
			http.Redirect(w, r, "http://10.0.0.1/", http.StatusFound)
		case "/file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		}
	}))
	defer inner.Close()

	get := func(client *http.Client, path string) (string, error) {
		resp, err := client.Get(inner.URL + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := ReadBody(resp.Body, 1024)
		return string(b), err
	}
	allowed := NewClient(Options{AllowPrivateNetworks: true})
	if body, err := get(allowed, "/chain"); err != nil || body != "ok" {
		t.Fatalf("three redirects: %q %v", body, err)
	}
	if _, err := get(allowed, "/loop"); err == nil || !strings.Contains(err.Error(), "stopped after 3 redirects") {
		t.Fatalf("redirect loop: %v", err)
	}
	if _, err := get(NewClient(Options{AllowPrivateNetworks: true, MaxRedirects: -1}), "/chain"); err == nil {
		t.Fatal("redirect followed with MaxRedirects -1")
	}
	if _, err := get(allowed, "/file"); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Fatalf("redirect to file: %v", err)
	}

	// The redirect target is checked at connect time like any destination.
	// The first hop is loopback too, so that one is allowed by a test-only
	// dial hook that checks every address except the fake server's.
	serverAddr := inner.Listener.Addr().String()
	client := NewClient(Options{})
	tr := client.Transport.(*roundTripper).next.(*http.Transport)
	d := &net.Dialer{ControlContext: func(ctx context.Context, network, address string, c syscall.RawConn) error {
		if address == serverAddr {
			return nil
		}
		return controlAddr(ctx, network, address, c)
	}}
	tr.DialContext = d.DialContext
	_, err := get(client, "/private")
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("redirect to private address: %v", err)
	}
}

func TestSlowBodyIsCutOffAtTimeout(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := w.Write([]byte("{")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-done:
				return
			case <-tick.C:
			}
		}
	}))
	defer srv.Close()
	defer close(done)

	const timeout = 300 * time.Millisecond
	client := NewClient(Options{AllowPrivateNetworks: true, Timeout: timeout})
	start := time.Now()
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = ReadBody(resp.Body, 1<<20)
	elapsed := time.Since(start)
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("want a timeout, got %v", err)
	}
	if elapsed < timeout || elapsed > timeout+2*time.Second {
		t.Fatalf("cut off after %v, want about %v", elapsed, timeout)
	}
}

func TestReadBody(t *testing.T) {
	b, err := ReadBody(strings.NewReader("12345"), 5)
	if err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q %v", b, err)
	}
	if _, err := ReadBody(strings.NewReader("123456"), 5); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := ReadBody(io.MultiReader(strings.NewReader("12"), errReader{}), 5); err == nil || errors.Is(err, ErrTooLarge) {
		t.Fatalf("read error: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestCheckAddr(t *testing.T) {
	for addr, reason := range map[string]string{
		"127.0.0.1":       "loopback",
		"10.1.2.3":        "private",
		"172.31.255.255":  "private",
		"192.168.1.1":     "private",
		"169.254.169.254": "link-local",
		"100.127.0.1":     "shared address space (CGNAT)",
		"0.0.0.0":         "unspecified",
		"224.0.0.1":       "multicast",
		"255.255.255.255": "reserved",
		"::":              "unspecified",
		"::1":             "loopback",
		"fd00::1":         "private",
		"fe80::1":         "link-local",
		"ff02::1":         "multicast",
		"::ffff:10.0.0.1": "private",
		"64:ff9b::7f00:1": "loopback",
		// IPv4 carried in other IPv6 forms (a review found all of these
		// let through): 6to4, IPv4-compatible, local-use NAT64 (RFC
		// 8215), SIIT, Teredo.
		"2002:7f00:1::1":         "6to4",
		"2002:a9fe:a9fe::1":      "6to4",
		"2002:808:808::1":        "6to4",
		"::7f00:1":               "IPv4-compatible",
		"::a00:1":                "IPv4-compatible",
		"64:ff9b:1::a00:1":       "local-use NAT64",
		"64:ff9b:1::808:808":     "local-use NAT64",
		"64:ff9b:1:0:7f:0:100:0": "local-use NAT64", // 127.0.0.1 under a /64 prefix
		"::ffff:0:a00:1":         "private",
		"::ffff:0:808:808":       "",
		"2001:0:4136:e378::1":    "Teredo",
		"2001:db8::1":            "documentation",
		"3fff::1":                "documentation",
		"3fff:fff:ffff::1":       "documentation",
		"100::1":                 "discard-only",
		"2001:2::1":              "benchmarking",
		"3fff:1000::1":           "", // past 3fff::/20
		"2001:3::1":              "",
		"8.8.8.8":                "",
		"172.32.0.1":             "",
		"100.128.0.1":            "",
		"2606:4700::1111":        "",
		"64:ff9b::808:808":       "",
	} {
		err := CheckAddr(netip.MustParseAddr(addr))
		var ferr *ForbiddenError
		switch {
		case reason == "" && err != nil:
			t.Errorf("%s refused: %v", addr, err)
		case reason != "" && (!errors.As(err, &ferr) || ferr.Reason != reason):
			t.Errorf("%s: got %v, want %q", addr, err, reason)
		}
	}
}

func TestCheckHost(t *testing.T) {
	for host, refused := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "pds.localhost": true, "127.0.0.1": true,
		"[::1]": true, "10.0.0.1": true, "169.254.169.254": true,
		"pds.example.com": false, "8.8.8.8": false, "localhost.example.com": false,
	} {
		err := CheckHost(host)
		if refused != errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("%s: got %v, want refused=%v", host, err, refused)
		}
	}
}
