package clientkey

import "testing"

func TestOf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::1", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"192.0.2.1", "192.0.2.1"},
		{"::ffff:192.0.2.2", "::ffff:192.0.2.2"},
		{"not an address", "not an address"},
	} {
		if got := Of(tc.in); got != tc.want {
			t.Errorf("Of(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
