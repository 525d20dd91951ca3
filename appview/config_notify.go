package appview

import "strings"

// NotifyConfig enables POST /xrpc/<namespace>.notifyOfUpdate, with which an
// app asks the daemon to fetch its user's records from their PDS now
// instead of waiting for Jetstream.
type NotifyConfig struct {
	// Enabled serves the method; off, it is answered as an unknown method.
	Enabled bool `yaml:"enabled"`
	// Secret is the bearer secret callers send
	// (Authorization: Bearer <secret>).
	Secret string `yaml:"secret" secret:"true"`
}

// minNotifySecret is the shortest secret accepted: anything shorter can
// be guessed by a caller with patience.
const minNotifySecret = 16

func (c Config) validateNotify(fail func(field, format string, args ...any)) {
	if !c.Notify.Enabled {
		return
	}
	if len(c.Notify.Secret) < minNotifySecret {
		fail("notify.secret", "must be at least %d characters when notify.enabled is true", minNotifySecret)
	}
	if c.Notify.Secret != strings.TrimSpace(c.Notify.Secret) {
		// A YAML block scalar or an environment variable can end in a
		// newline; refused, not trimmed, so the secret callers send is
		// exactly the one written down (TestNotifySecretWithSurroundingSpaceIsRefused).
		fail("notify.secret", "must not begin or end with whitespace (such as a YAML block scalar's newline): a caller's bearer token is read without it, so no call could match")
	}
}
