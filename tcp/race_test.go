//go:build race

package tcp

// raceEnabled is true when the tests run under the race detector, whose
// sync.Pool drops a quarter of what is put in it: pooled wait timers are
// then made afresh, so allocation counts mean nothing there.
const raceEnabled = true
