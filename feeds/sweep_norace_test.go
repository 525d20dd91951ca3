//go:build !race

package feeds

const raceEnabled = false
