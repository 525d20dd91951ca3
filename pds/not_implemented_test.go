package pds

import (
	"testing"
	"time"

	"github.com/atfeeds/appview/pds/pdstest"
)

// A host that answers 404 MethodNotImplemented (not a PDS at all, or one
// without listRecords or getRecord) has said nothing about the record or
// the repo. Taken for "not found", it had a profile stored as absent and
// a notified record deleted (KindNotFound's callers). It is a host
// failure, retried like a 5xx. A 404 that names a missing record still
// means one.
func TestAMethodNotImplementedIsNotARecordNotFound(t *testing.T) {
	notPDS := pdstest.NewNotAPDS()
	t.Cleanup(notPDS.Close)
	c := newTestClient(5 * time.Second)

	_, err := c.GetRecord(t.Context(), notPDS.URL, alice, posts, tid(1))
	if KindOf(err) != KindUpstream || !Retryable(err) {
		t.Errorf("getRecord answered 404 MethodNotImplemented: %v (kind %s), want a retryable upstream failure", err, KindOf(err))
	}
	_, err = c.ListRecords(t.Context(), notPDS.URL, alice, posts, 10, "")
	if KindOf(err) != KindUpstream || !Retryable(err) {
		t.Errorf("listRecords answered 404 MethodNotImplemented: %v (kind %s), want a retryable upstream failure", err, KindOf(err))
	}
}
