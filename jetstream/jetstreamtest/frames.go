package jetstreamtest

import (
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Rev returns a valid, string-sortable revision (a TID) for a counter.
func Rev(n int64) string { return string(syntax.NewTIDFromInteger(uint64(n) << 10)) }

// Post is a create of an app.bsky.feed.post frame.
func Post(did, rkey string, timeUS int64, text string) []byte {
	return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":%q,"operation":"create","collection":"app.bsky.feed.post","rkey":%q,"record":{"$type":"app.bsky.feed.post","createdAt":%q,"langs":["en"],"text":%q},"cid":"bafyreigwuiotmkaytriom4alrxkamtlzsf35xljotttx6oy3hd63xuxyyq"}}`,
		did, timeUS, Rev(timeUS), rkey, time.UnixMicro(timeUS).UTC().Format(syntax.AtprotoDatetimeLayout), text))
}

// Follow is a create of a follow record in collection (app.bsky.graph.follow
// or any custom follow NSID).
func Follow(collection, did, rkey, subject string, timeUS int64) []byte {
	return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":%q,"operation":"create","collection":%q,"rkey":%q,"record":{"$type":%q,"createdAt":"2024-10-02T08:19:35Z","subject":%q},"cid":"bafyreibaowdggfizbfrk2ypwue7e2mw5a3mjn665rxjs6gx7pd7oxfha3y"}}`,
		did, timeUS, Rev(timeUS), collection, rkey, collection, subject))
}

// Delete is a delete commit of any record.
func Delete(collection, did, rkey string, timeUS int64) []byte {
	return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":%q,"operation":"delete","collection":%q,"rkey":%q}}`,
		did, timeUS, Rev(timeUS), collection, rkey))
}

// Profile is a create of an app.bsky.actor.profile/self frame with a display
// name and an avatar blob.
func Profile(did string, timeUS int64, displayName string) []byte {
	return []byte(fmt.Sprintf(`{"did":%q,"time_us":%d,"kind":"commit","commit":{"rev":%q,"operation":"create","collection":"app.bsky.actor.profile","rkey":"self","record":{"$type":"app.bsky.actor.profile","displayName":%q,"description":"hello","avatar":{"$type":"blob","ref":{"$link":"bafkreibme22gw2h7y2h7tg2fhqotaqjucnbc24deqo72b6mkl2egezxhvy"},"mimeType":"image/jpeg","size":1234}},"cid":"bafyreihrwzzmnhtxvbqhxkjbl4ca4ujtgxzzsivg5gkh5tfxmrmbtdp6ka"}}`,
		did, timeUS, Rev(timeUS), displayName))
}
