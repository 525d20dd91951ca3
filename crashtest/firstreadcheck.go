package crashtest

import "slices"

// CheckState compares what the database holds of first reads with the
// world. Listings first: a page and its cursor are one transaction, and
// the PDSes never change, so every listing's stored rows must be exactly
// the newest Fetched records of its account's collection, its cursor the
// last of them, never past its limit, and a listing marked complete must
// hold all it covers. Then viewers: a complete viewer's feed rows are
// exactly its expected feed, none twice; a pending viewer has none.
func (w *PDSWorld) CheckState(st *FirstReadState) *Mismatches {
	out := newMismatches()
	if st.Orphans > 0 {
		out.add("feed row of a missing record", "%d rows", st.Orphans)
	}
	for k, l := range st.Listings {
		w.checkListing(k, l, st, out)
	}
	for d := range st.Follows {
		if _, ok := st.Listings[ListingKey{d, string(followNSID)}]; !ok {
			out.add("follows without a listing", "%s: %d rows", d, len(st.Follows[d]))
		}
	}
	for d := range st.Posts {
		if _, ok := st.Listings[ListingKey{d, string(postNSID)}]; !ok {
			out.add("posts without a listing", "%s: %d rows", d, len(st.Posts[d]))
		}
	}
	for d, state := range st.Viewers {
		v, ok := w.accounts[d]
		if !ok || int(v) >= w.Config.Viewers {
			out.add("viewer from nowhere", "%s", d)
			continue
		}
		switch state {
		case "complete":
			if l := st.Listings[ListingKey{d, string(followNSID)}]; !l.Complete {
				out.add("viewer complete before its follows listing", "%s: %+v", d, l)
			}
			w.compareFeedRows(v, st.Feeds[d], out)
		default:
			if n := len(st.Feeds[d]); n > 0 {
				out.add("feed rows before the first read completed", "%s (%s): %d rows", d, state, n)
			}
		}
	}
	for d, rows := range st.Feeds {
		if _, ok := st.Viewers[d]; !ok {
			out.add("feed rows of no viewer", "%s: %d rows", d, len(rows))
		}
	}
	return out
}

// listed is one record of a listing as the check sees it: its key and
// what the database must hold for it.
type listed struct {
	rkey    string
	subject string     // follows
	post    storedPost // posts
}

func (w *PDSWorld) listing(a int32, coll string) (all []listed, limit int) {
	if coll == string(followNSID) {
		for _, f := range w.follows[a] {
			all = append(all, listed{rkey: f.rkey, subject: did(f.subject)})
		}
		return all, w.Config.Limits.MaxFollows
	}
	for _, p := range w.posts[a] {
		all = append(all, listed{rkey: p.rkey, post: storedPost{cid: p.cid, sortUS: p.sortUS, indexedUS: p.indexedUS}})
	}
	return all, w.Config.Limits.Depth
}

func (w *PDSWorld) checkListing(k ListingKey, l ListingRow, st *FirstReadState, out *Mismatches) {
	a, ok := w.accounts[k.DID]
	if !ok || (k.Collection != string(followNSID) && k.Collection != string(postNSID)) {
		out.add("listing from nowhere", "%s %s", k.DID, k.Collection)
		return
	}
	all, limit := w.listing(a, k.Collection)
	switch {
	case !w.registered(a) && (l.Fetched > 0 || l.Complete):
		out.add("listing of an unresolvable account fetched", "%s %s: %+v", k.DID, k.Collection, l)
	case l.Fetched > limit:
		out.add("listing fetched past its limit", "%s %s: fetched %d, limit %d", k.DID, k.Collection, l.Fetched, limit)
	case l.Fetched > len(all):
		out.add("listing counts more than the PDS holds", "%s %s: fetched %d of %d", k.DID, k.Collection, l.Fetched, len(all))
	case l.Complete && l.Fetched != min(limit, len(all)):
		out.add("listing complete with rows missing", "%s %s: fetched %d, want %d", k.DID, k.Collection, l.Fetched, min(limit, len(all)))
	case !l.Complete && l.Fetched > 0 && l.Cursor != all[l.Fetched-1].rkey:
		out.add("listing cursor not at its last stored row", "%s %s: cursor %q after %d, want %q",
			k.DID, k.Collection, l.Cursor, l.Fetched, all[l.Fetched-1].rkey)
	}
	want := all[:min(l.Fetched, len(all))]
	got := stored(st, k)
	for _, r := range want {
		g, ok := got[r.rkey]
		switch {
		case !ok:
			out.add("listed record lost (cursor ahead of its rows)", "%s/%s/%s", k.DID, k.Collection, r.rkey)
		case !w.sameListed(g, r):
			out.add("listed record differs", "%s/%s: %+v, want %+v", k.DID, k.Collection, g, r)
		}
	}
	for rkey := range got {
		if !slices.ContainsFunc(want, func(r listed) bool { return r.rkey == rkey }) {
			out.add("record beyond its listing cursor", "%s/%s/%s (fetched %d)", k.DID, k.Collection, rkey, l.Fetched)
		}
	}
}

// sameListed says whether the stored record got is the listed record
// want: the same, but for a post's indexed time (indexedOK).
func (w *PDSWorld) sameListed(got, want listed) bool {
	if want.post == (storedPost{}) {
		return got == want // a follow
	}
	g, p := got, want
	g.post.indexedUS, p.post.indexedUS = 0, 0
	return g == p && w.indexedOK(got.post.indexedUS, want.post.indexedUS)
}

// stored returns the records the database holds for a listing, by key.
func stored(st *FirstReadState, k ListingKey) map[string]listed {
	out := map[string]listed{}
	if k.Collection == string(followNSID) {
		for rkey, s := range st.Follows[k.DID] {
			out[rkey] = listed{rkey: rkey, subject: s}
		}
		return out
	}
	for rkey, p := range st.Posts[k.DID] {
		out[rkey] = listed{rkey: rkey, post: p}
	}
	return out
}

func (w *PDSWorld) compareFeedRows(v int32, rows []storedFeedRow, out *Mismatches) {
	want := map[ListingKey]FeedPost{} // (author DID, rkey)
	for _, p := range w.Feed(v) {
		want[ListingKey{did(p.Author), p.RKey}] = p
	}
	seen := map[ListingKey]bool{}
	for _, r := range rows {
		k := ListingKey{r.author, r.rkey}
		p, ok := want[k]
		switch {
		case seen[k]:
			out.add("feed item duplicated", "viewer %s: %s/%s", did(v), r.author, r.rkey)
		case !ok:
			out.add("feed item not in the expected feed", "viewer %s: %s/%s at %d", did(v), r.author, r.rkey, r.sortUS)
		case p.SortUS != r.sortUS:
			out.add("feed item out of place", "viewer %s: %s/%s at %d, want %d", did(v), r.author, r.rkey, r.sortUS, p.SortUS)
		}
		seen[k] = true
	}
	for k := range want {
		if !seen[k] {
			out.add("feed item lost", "viewer %s: %s/%s", did(v), k.DID, k.Collection)
		}
	}
}

// checkServed compares a viewer's feed as getFeed served it, page after
// page, with the expected feed: the same posts in the same order, none
// twice, each with its CID and indexed time.
func (w *PDSWorld) checkServed(v int32, items []servedItem, out *Mismatches) {
	want := w.Feed(v)
	seen := map[ListingKey]bool{}
	for i, it := range items {
		k := ListingKey{it.did, it.rkey}
		if seen[k] {
			out.add("getFeed: item served twice", "viewer %s: %s/%s", did(v), it.did, it.rkey)
			continue
		}
		seen[k] = true
		if i >= len(want) {
			out.add("getFeed: more items than expected", "viewer %s: %s/%s at %d, want %d items", did(v), it.did, it.rkey, i, len(want))
			continue
		}
		p := want[i]
		switch {
		case it.did != did(p.Author) || it.rkey != p.RKey:
			out.add("getFeed: wrong item", "viewer %s at %d: %s/%s, want %s/%s", did(v), i, it.did, it.rkey, did(p.Author), p.RKey)
		case it.cid != p.CID:
			out.add("getFeed: cid differs", "viewer %s: %s/%s", did(v), it.did, it.rkey)
		case !w.indexedOK(it.timeUS, p.IndexedUS):
			out.add("getFeed: time_us differs", "viewer %s: %s/%s %d, want %d", did(v), it.did, it.rkey, it.timeUS, p.IndexedUS)
		}
	}
	if len(items) < len(want) {
		out.add("getFeed: items lost", "viewer %s: %d served, want %d", did(v), len(items), len(want))
	}
}
