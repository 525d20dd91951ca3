package jetstream

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"github.com/gorilla/websocket"
)

// maxHandshakeBytes bounds what the connection reads before the websocket
// handshake completes: over wss the TLS handshake (the certificate chain),
// a proxy's answer to CONNECT, the upgrade's status line and headers (on a
// refusal, the first KiB of the body gorilla keeps) and any first frames
// read with them. A Jetstream upgrade answer is a few hundred bytes, and
// all of it together a few KiB. Gorilla reads the headers with net/http's parser, which
// bounds nothing on the client side, so a broken or hostile endpoint that
// streamed headers for the whole handshake timeout (10 s) had them all
// held in memory.
const maxHandshakeBytes = 64 << 10

// errHandshakeTooLarge ends a dial whose server sent more than
// maxHandshakeBytes before the upgrade.
var errHandshakeTooLarge = errors.New("the server sent more than 64 KiB before the websocket upgrade")

// handshakeConn caps the bytes read from the server until the handshake
// is over (lift).
type handshakeConn struct {
	net.Conn
	// left is what the handshake may still read; -1 once lifted.
	left atomic.Int64
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	left := c.left.Load()
	if left < 0 {
		return c.Conn.Read(p)
	}
	if left == 0 {
		return 0, errHandshakeTooLarge
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.Conn.Read(p)
	c.left.Add(-int64(n))
	return n, err
}

// boundedDialer returns a copy of d whose connection reads at most
// maxHandshakeBytes until lift is called, and lift, which removes the cap
// from the connection the copy dialed (call it once DialContext
// succeeded). A copy serves one dial.
func boundedDialer(d *websocket.Dialer) (dialer *websocket.Dialer, lift func()) {
	var dialed []*handshakeConn // one: a proxy's tunnel is the same connection
	bound := func(conn net.Conn, err error) (net.Conn, error) {
		if err != nil {
			return nil, err
		}
		hc := &handshakeConn{Conn: conn}
		hc.left.Store(maxHandshakeBytes)
		dialed = append(dialed, hc)
		return hc, nil
	}
	plain := d.NetDialContext
	if plain == nil {
		if nd := d.NetDial; nd != nil {
			plain = func(_ context.Context, network, addr string) (net.Conn, error) { return nd(network, addr) }
		} else {
			plain = (&net.Dialer{}).DialContext
		}
	}
	b := *d
	b.NetDial = nil
	b.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return bound(plain(ctx, network, addr))
	}
	if tlsDial := d.NetDialTLSContext; tlsDial != nil {
		b.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return bound(tlsDial(ctx, network, addr))
		}
	}
	return &b, func() {
		for _, hc := range dialed {
			hc.left.Store(-1)
		}
	}
}
