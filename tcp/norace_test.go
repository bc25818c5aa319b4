//go:build !race

package tcp

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = false
