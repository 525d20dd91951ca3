package feeds

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrWriteBusy: a write transaction could not begin within the busy
// timeout because another connection, on another process (an operator
// command beside the daemon), held the write lock. Nothing was written;
// the write may be tried again.
var ErrWriteBusy = errors.New("the database's write lock is held by another connection")

// isBusy says whether err is SQLite's SQLITE_BUSY (any extended code).
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// The writer pool holds one connection, and state that lives on a
// connection, the fan-out's TEMP table (fanout.go), must be there whatever
// connection the pool holds. database/sql replaces a connection it finds
// broken, such as one whose statement was interrupted because its
// context ended; a replacement without the table failed every later
// batch that fanned out, and the ingester stopped the daemon. So every
// writer connection makes the table as it opens.

// writerConnector opens writer connections on a driver of their own,
// whose connection hook makes the TEMP table and counts the connection in
// opened (other_writers.go: a new connection's data_version says nothing
// about commits before it opened).
func writerConnector(dsn string, opened *atomic.Int64) driver.Connector {
	drv := &sqlite.Driver{}
	drv.RegisterConnectionHook(func(c sqlite.ExecQuerierContext, _ string) error {
		opened.Add(1)
		_, err := c.ExecContext(context.Background(), fanoutSQL.createPending, nil)
		return err
	})
	return dsnConnector{drv: drv, dsn: dsn}
}

// dsnConnector is a driver.Connector for a driver and a DSN.
type dsnConnector struct {
	drv driver.Driver
	dsn string
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }

func (c dsnConnector) Driver() driver.Driver { return c.drv }
