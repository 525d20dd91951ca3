package jetstream

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// Position is the last point of the stream the caller has made durable.
type Position struct {
	TimeUS int64
	// Seq and Host go together: a v2 server's sequence number is only
	// meaningful on the instance that assigned it.
	Seq  int64
	Host string
}

// cursorFor picks the cursor to resume from on host. A sequence number is
// exact but only valid on the host that issued it; anywhere else we fall
// back to time_us, rewound because time_us is not unique and servers
// differ slightly in what they hold. 0 means "send no cursor": cursor=0
// would make a v2 server replay its whole window.
func cursorFor(host string, pos Position, rewind time.Duration) int64 {
	if pos.Seq > 0 && pos.Host == host {
		return pos.Seq
	}
	if pos.TimeUS > 0 {
		if c := pos.TimeUS - rewind.Microseconds(); c > 0 {
			return c
		}
	}
	return 0
}

// subscribeURL builds the URL to dial on host. It never asks for
// compress=true (a zstd dictionary we cannot ship) nor a server-side size
// cap (the server would silently skip larger events, deletes included).
func subscribeURL(host string, wanted []string, cursor int64) (string, error) {
	u, err := parseHost(host)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Del("cursor")
	if len(wanted) > 0 {
		q["wantedCollections"] = slices.Clone(wanted)
	}
	if cursor > 0 {
		q.Set("cursor", strconv.FormatInt(cursor, 10))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func parseHost(host string) (*url.URL, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("parse jetstream url: %w", err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return nil, fmt.Errorf("jetstream url %q: scheme must be ws or wss", host)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("jetstream url %q: missing host", host)
	}
	return u, nil
}
