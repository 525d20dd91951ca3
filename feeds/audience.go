package feeds

// audienceFilter is the single predicate deciding who receives fan-out,
// appended to the fan-out join of follows f and feed_targets t.
//
// In index_all mode every account whose follow records are stored is a
// viewer, so the join itself is the audience and the filter is empty. The
// read-driven mode (viewers are those who read their feed) narrows it here
// and only here.
const audienceFilter = ``
