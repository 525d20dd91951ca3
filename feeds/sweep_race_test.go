//go:build race

package feeds

// raceEnabled: the race detector also instruments the SQLite engine (modernc
// is Go), which makes each statement about 25 times slower.
const raceEnabled = true
