package backfill

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A client's bucket is its IPv6 /64: a host that owns one (the usual
// smallest allocation) does not get a fresh bucket for each of its
// addresses (found by a review: 1,000 addresses of one /64 were all
// admitted at once with a burst of 1). Other /64s, and IPv4 addresses,
// keep buckets of their own.
func TestAdmissionBucketsAnIPv6ClientByItsSlash64(t *testing.T) {
	a := newAdmission(AdmissionConfig{PerClientRate: 1.0 / 60, PerClientBurst: 1, MaxRunning: 1, MaxClients: 10_000})
	now := time.Unix(1_000, 0)
	if err := a.allowClient("2001:db8:1:2::1", now); err != nil {
		t.Fatalf("first address of the /64: %v", err)
	}
	for i := 2; i < 1000; i++ {
		if err := a.allowClient(fmt.Sprintf("2001:db8:1:2::%x", i), now); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("address %d of the same /64 was admitted (%v)", i, err)
		}
	}
	for _, other := range []string{"2001:db8:1:3::1", "192.0.2.1", "::ffff:192.0.2.2", "fe80::1%eth0"} {
		if err := a.allowClient(other, now); err != nil {
			t.Errorf("%s shares the first /64's bucket: %v", other, err)
		}
	}
}
