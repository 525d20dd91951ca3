package crashtest

import (
	"fmt"
	"sort"
	"strings"

	"github.com/atfeeds/appview/workload"
)

// Mismatches collects what the database got wrong, counted by kind, with
// a few examples of each.
type Mismatches struct {
	counts   map[string]int
	examples map[string][]string
}

func newMismatches() *Mismatches {
	return &Mismatches{counts: map[string]int{}, examples: map[string][]string{}}
}

const examplesPerKind = 3

func (m *Mismatches) add(kind, format string, args ...any) {
	m.counts[kind]++
	if len(m.examples[kind]) < examplesPerKind {
		m.examples[kind] = append(m.examples[kind], fmt.Sprintf(format, args...))
	}
}

// Empty reports whether nothing was found.
func (m *Mismatches) Empty() bool { return len(m.counts) == 0 }

// String lists every kind with its count and examples.
func (m *Mismatches) String() string {
	kinds := make([]string, 0, len(m.counts))
	for k := range m.counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "%s: %d\n", k, m.counts[k])
		for _, e := range m.examples[k] {
			fmt.Fprintf(&b, "    %s\n", e)
		}
	}
	return b.String()
}

func did(a int32) string { return workload.AccountDID(int(a)) }

// CompareState checks the database against the model: the same follows,
// the same live posts (cid, rev, position), and every viewer's feed rows
// exactly the model's feed.
func CompareState(m *Model, st *DBState) *Mismatches {
	out := newMismatches()
	if st.Orphans > 0 {
		out.add("feed row of a missing record", "%d rows", st.Orphans)
	}
	for k, want := range m.follows {
		got, ok := st.Follows[k]
		switch {
		case want.live && !ok:
			out.add("follow lost", "%s/%s → %s", did(k.account), k.rkey, did(want.subject))
		case !want.live && ok:
			out.add("deleted follow resurrected", "%s/%s", did(k.account), k.rkey)
		case ok && (got.subject != want.subject || got.rev != want.rev):
			out.add("follow differs", "%s/%s: subject %s rev %s, want %s rev %s",
				did(k.account), k.rkey, did(got.subject), got.rev, did(want.subject), want.rev)
		}
	}
	for k := range st.Follows {
		if m.follows[k] == nil {
			out.add("follow from nowhere", "%s/%s", did(k.account), k.rkey)
		}
	}
	for k, want := range m.posts {
		got, ok := st.Posts[k]
		switch {
		case want.live && !ok:
			out.add("post lost", "%s/%s", did(k.account), k.rkey)
		case !want.live && ok:
			out.add("deleted post resurrected", "%s/%s", did(k.account), k.rkey)
		case ok && (got.cid != want.cid || got.rev != want.rev):
			out.add("post update lost or misapplied", "%s/%s: cid %s rev %s, want cid %s rev %s",
				did(k.account), k.rkey, got.cid, got.rev, want.cid, want.rev)
		case ok && (got.sortUS != want.sortUS || got.indexedUS != want.indexedUS):
			out.add("post position differs", "%s/%s: sort %d indexed %d, want %d %d",
				did(k.account), k.rkey, got.sortUS, got.indexedUS, want.sortUS, want.indexedUS)
		}
	}
	for k := range st.Posts {
		if m.posts[k] == nil {
			out.add("post from nowhere", "%s/%s", did(k.account), k.rkey)
		}
	}
	viewers := map[int32]bool{}
	for v := range m.followCount {
		viewers[v] = true
	}
	for v := range st.Feeds {
		viewers[v] = true
	}
	for v := range viewers {
		compareFeed(m, v, m.Feed(v), st.Feeds[v], out)
	}
	return out
}

func compareFeed(m *Model, v int32, want map[key]*postRec, rows []feedRow, out *Mismatches) {
	seen := make(map[key]bool, len(rows))
	for _, r := range rows {
		k := key{r.author, r.rkey}
		if seen[k] {
			out.add("feed item duplicated", "viewer %s: %s/%s", did(v), did(r.author), r.rkey)
			continue
		}
		seen[k] = true
		p, ok := want[k]
		if !ok {
			explainExtra(m, v, k, out)
			continue
		}
		if r.sortUS != p.sortUS {
			out.add("feed item out of place", "viewer %s: %s/%s at %d, want %d", did(v), did(r.author), r.rkey, r.sortUS, p.sortUS)
		}
	}
	for k := range want {
		if !seen[k] {
			out.add("feed item lost", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
		}
	}
}

// explainExtra names why a feed item should not be there.
func explainExtra(m *Model, v int32, k key, out *Mismatches) {
	p := m.post(k.account, k.rkey)
	switch {
	case p == nil:
		out.add("feed item from nowhere", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
	case !p.live:
		out.add("deleted post resurrected in feed", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
	case k.account == v:
		out.add("own post in feed", "viewer %s: %s", did(v), k.rkey)
	case !m.isFollowing(v, k.account):
		out.add("unfollowed author's post in feed", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
	default:
		out.add("feed item unexplained", "viewer %s: %s/%s", did(v), did(k.account), k.rkey)
	}
}
