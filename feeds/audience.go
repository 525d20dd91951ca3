package feeds

// audienceFilter is the single predicate deciding who receives fan-out,
// appended to the fan-out join of follows f and feed_targets t.
//
// In index_all mode every account whose follow records are stored is a
// viewer of every feed, so the join itself is the audience. Otherwise the
// audience is the viewers registered for the lane's feed; since only
// viewers' follow records are stored at all, the check runs once per stored
// follower of the author, never once per follower on the network.
func audienceFilter(indexAll bool) string {
	if indexAll {
		return ``
	}
	return ` AND EXISTS (SELECT 1 FROM viewers v WHERE v.actor_id = f.actor_id AND v.feed = t.feed)`
}
