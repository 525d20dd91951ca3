package crashtest

import (
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/atfeeds/appview/directory/plctest"
	"github.com/atfeeds/appview/pds/pdstest"
	"github.com/atfeeds/appview/workload"
)

// LogWorld is the network a generated Jetstream log came from, as the log
// leaves it: a PLC directory and a few PDSes on loopback where every
// account's repo holds its live follows and posts after the log's last
// frame, each post with the CID of its last write and its feed position
// (createdAt) from the write that made it live.
//
// A daemon that lists these repos while it replays the log (a first read
// during a catch-up, in read-driven mode) sees records ahead of the
// replay, as a real PDS shows them to a daemon catching up after
// downtime. Whenever each listing comes, the listings and the stream
// merged by record key and revision must end with the feeds of the whole
// log: every live post of every account a viewer follows, given a depth
// and max_follows no smaller than MostPosts and MostFollows.
type LogWorld struct {
	PLC   *plctest.Server
	PDSes []*pdstest.Server
	// Final is the model with the whole log applied.
	Final *Model
	// MostPosts and MostFollows are the most live posts and follow
	// records any one account holds at the end.
	MostPosts, MostFollows int
}

// NewLogWorld applies the whole of l to a model and starts the servers
// holding what it leaves; Close stops them.
func NewLogWorld(l *Log, pdses int) (*LogWorld, error) {
	final := NewModel(l)
	if err := final.AdvanceTo(l.EndUS); err != nil {
		return nil, err
	}
	w := &LogWorld{PLC: plctest.NewServer(), Final: final}
	for range pdses {
		w.PDSes = append(w.PDSes, pdstest.NewServer())
	}
	pdsOf := func(a int32) *pdstest.Server { return w.PDSes[int(a)%len(w.PDSes)] }
	for i := range l.Workload.Config().Accounts {
		d := syntax.DID(did(int32(i)))
		w.PLC.Add(d, "", pdsOf(int32(i)).URL())
		pdsOf(int32(i)).AddRepo(d)
	}
	follows := map[int32]int{}
	for k, f := range final.follows {
		if !f.live {
			continue
		}
		tid, err := syntax.ParseTID(k.rkey)
		if err != nil {
			return nil, fmt.Errorf("follow %s/%s: %w", did(k.account), k.rkey, err)
		}
		value := fmt.Sprintf(`{"$type":%q,"subject":%q,"createdAt":%q}`,
			workload.FollowCollection, did(f.subject), datetime(tid.Time().UnixMicro()))
		pdsOf(k.account).AddRecord(syntax.DID(did(k.account)), followNSID, syntax.RecordKey(k.rkey), value)
		follows[k.account]++
		w.MostFollows = max(w.MostFollows, follows[k.account])
	}
	for author, posts := range final.livePosts {
		for rkey, p := range posts {
			value := fmt.Sprintf(`{"$type":%q,"text":"listed","createdAt":%q}`, workload.PostCollection, datetime(p.sortUS))
			pdsOf(author).AddRecordCID(syntax.DID(did(author)), postNSID, syntax.RecordKey(rkey), value, p.cid)
		}
		w.MostPosts = max(w.MostPosts, len(posts))
	}
	return w, nil
}

// Close stops the servers.
func (w *LogWorld) Close() {
	w.PLC.Close()
	for _, s := range w.PDSes {
		s.Close()
	}
}

// requests is how many requests the PDSes have answered.
func (w *LogWorld) requests() int {
	n := 0
	for _, s := range w.PDSes {
		n += s.TotalRequests()
	}
	return n
}

// datetime formats unix microseconds as a record's createdAt.
func datetime(us int64) string {
	return time.UnixMicro(us).UTC().Format("2006-01-02T15:04:05.000000Z")
}
