package workload

import (
	"math/rand/v2"
	"strconv"
)

// Frame builders. They append JSON in the field order Jetstream uses, with
// no escaping needed: every string the generator writes is made of safe
// characters.

const (
	postNSID   = "app.bsky.feed.post"
	followNSID = "app.bsky.graph.follow"
)

// PostCollection and FollowCollection are the collections the workload
// writes; a daemon under it needs a feed with these.
const (
	PostCollection   = postNSID
	FollowCollection = followNSID
)

func appendCommitHead(b []byte, did int, timeUS, revUS int64, revClock uint16, op, collection string, rkeyUS int64, rkeyClock uint16) []byte {
	b = append(b, `{"did":"`...)
	b = appendDID(b, did)
	b = append(b, `","time_us":`...)
	b = strconv.AppendInt(b, timeUS, 10)
	b = append(b, `,"kind":"commit","commit":{"rev":"`...)
	b = appendTID(b, revUS, revClock)
	b = append(b, `","operation":"`...)
	b = append(b, op...)
	b = append(b, `","collection":"`...)
	b = append(b, collection...)
	b = append(b, `","rkey":"`...)
	b = appendTID(b, rkeyUS, rkeyClock)
	b = append(b, '"')
	return b
}

// appendFollow appends a follow create; the rev is the TID of its time.
func appendFollow(b []byte, follower, subject int, timeUS, rkeyUS int64, clock uint16, cidHash uint64) []byte {
	b = appendCommitHead(b, follower, timeUS, timeUS, clock, "create", followNSID, rkeyUS, clock)
	b = append(b, `,"record":{"$type":"app.bsky.graph.follow","createdAt":"`...)
	b = appendDatetime(b, rkeyUS)
	b = append(b, `","subject":"`...)
	b = appendDID(b, subject)
	b = append(b, `"},"cid":"`...)
	b = appendCID(b, cidHash)
	b = append(b, `"}}`...)
	return b
}

// postRef names a stored post: its author and rkey (a TID).
type postRef struct {
	author    int32
	clock     uint16
	live      bool
	rkeyUS    int64
	createdUS int64
}

// appendPost appends a post create or update. reply, when set, makes it a
// reply to that post (as root and parent).
func appendPost(b []byte, r *rand.Rand, op string, p *postRef, timeUS int64, clock uint16, reply *postRef) []byte {
	b = appendCommitHead(b, int(p.author), timeUS, timeUS, clock, op, postNSID, p.rkeyUS, p.clock)
	b = append(b, `,"record":{"$type":"app.bsky.feed.post","createdAt":"`...)
	b = appendDatetime(b, p.createdUS)
	b = append(b, `","langs":["`...)
	b = append(b, langs[r.IntN(len(langs))]...)
	b = append(b, `"],`...)
	if reply != nil {
		for _, part := range []string{`"reply":{"parent":`, `,"root":`} {
			b = append(b, part...)
			b = append(b, `{"cid":"`...)
			b = appendCID(b, uint64(reply.rkeyUS)^uint64(reply.author))
			b = append(b, `","uri":"at://`...)
			b = appendDID(b, int(reply.author))
			b = append(b, `/app.bsky.feed.post/`...)
			b = appendTID(b, reply.rkeyUS, reply.clock)
			b = append(b, `"}`...)
		}
		b = append(b, `},`...)
	}
	b = append(b, `"text":"`...)
	b = appendText(b, r)
	b = append(b, `"},"cid":"`...)
	b = appendCID(b, r.Uint64())
	b = append(b, `"}}`...)
	return b
}

// appendDelete appends a delete commit, which carries no record or cid.
func appendDelete(b []byte, did int, collection string, timeUS int64, clock uint16, rkeyUS int64, rkeyClock uint16) []byte {
	b = appendCommitHead(b, did, timeUS, timeUS, clock, "delete", collection, rkeyUS, rkeyClock)
	b = append(b, `}}`...)
	return b
}

var langs = []string{"en", "en", "en", "ja", "pt", "de", "es", "fr"}

var words = []string{
	"the", "a", "feed", "post", "today", "just", "shipped", "new", "coffee", "morning",
	"atproto", "firehose", "sqlite", "timeline", "great", "thread", "reading", "about",
	"why", "how", "we", "built", "this", "small", "daemon", "and", "it", "works",
	"café", "naïve", "über", "☀", "🌊", "日本語", "olá", "mañana", "thanks", "everyone",
	"link", "photo", "weekend", "music", "code", "review", "release", "notes", "is", "out",
}

// appendText appends 1 to 300 characters of words, skewed short like real
// posts (most under 120).
func appendText(b []byte, r *rand.Rand) []byte {
	n := 1 + int(300*r.Float64()*r.Float64())
	start := len(b)
	for len(b)-start < n {
		if len(b) > start {
			b = append(b, ' ')
		}
		b = append(b, words[r.IntN(len(words))]...)
	}
	return b
}
