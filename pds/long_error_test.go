package pds

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestATransportErrorIsShort: a PDS that redirects to a URL tens of
// kilobytes long (a Location header may fill the 64 KiB header cap) must
// not make the error, which is logged and stored, carry that URL whole.
func TestATransportErrorIsShort(t *testing.T) {
	long := "http://127.0.0.1:1/" + strings.Repeat("a", 60<<10)
	for name, loc := range map[string]string{
		"unreachable target": long,
		"unparsable target":  long + "%zz\x7f",
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header()["Location"] = []string{loc}
				w.WriteHeader(http.StatusFound)
			}))
			defer srv.Close()
			c := newTestClient(5 * time.Second)
			_, err := c.ListRecords(t.Context(), srv.URL, alice, posts, 10, "")
			if err == nil {
				t.Fatal("listing through a redirect to nowhere succeeded")
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %T %v, want a *pds.Error", err, err)
			}
			if n := len(err.Error()); n > 1024 {
				t.Errorf("error message is %d bytes: %.200s…", n, err.Error())
			}
		})
	}
}
