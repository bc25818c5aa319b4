//go:build race

package comm_test

// raceEnabled is true when the tests run under the race detector.
const raceEnabled = true
