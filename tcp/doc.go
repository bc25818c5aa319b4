// Package tcp is gorun's TCP transport: one persistent, authenticated,
// full-duplex connection to every other rank (made while joining, or,
// with Config.Lazy, when the pair first needs it), length-checked
// framing, and posted receives that the peer's data is read into
// directly.
//
// The transport moves bytes and knows no collective algorithm. Every frame
// carries an opaque stream number (which communicator and which kind of
// traffic) and four opaque words of metadata that the algorithms use to check
// that both sides are in the same call. A goroutine per peer reads frames as
// they come, so a peer that dies is noticed at once, whatever this rank is
// doing, and reported by rank.
package tcp
