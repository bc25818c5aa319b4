//go:build !race

package tcp

// ioOrder orders sends before later reads for the race detector; see
// order_race.go. Without the detector it does nothing.
type ioOrder struct{}

func (*ioOrder) released() {}
func (*ioOrder) acquire()  {}
