package shm

// dirtyLines records, for the lines of a ring this rank sends into,
// which may hold a fragment's data at the spot of a sequence word: a
// record later placed right after such a line must have its sequence
// word zeroed before the record is published, or the receiver could take
// those bytes for a record published on the current lap. A line written
// last as a record's header line holds an old sequence number there,
// which never matches, and needs no zero: a stream of equal small frames
// goes round the ring over the same header spots every lap, and then
// writes no line beyond its own record (zeroing one was a measurable part
// of a small all-reduce). One bit per line, 1 for data; only the
// sender reads and writes it, under its send lock.
type dirtyLines []uint64

func newDirtyLines(ringBytes uint64) dirtyLines {
	return make(dirtyLines, (ringBytes/lineBytes+63)/64)
}

// header notes that the line at ring offset off now holds a header line
// (or a zeroed sequence word).
func (d dirtyLines) header(off uint64) {
	i := off / lineBytes
	d[i/64] &^= 1 << (i % 64)
}

// data notes that the n lines from ring offset off hold data.
func (d dirtyLines) data(off uint64, n int) {
	for i := off / lineBytes; n > 0; {
		bits := min(uint64(n), 64-i%64)
		mask := ^uint64(0)
		if bits < 64 {
			mask = (1<<bits - 1) << (i % 64)
		}
		d[i/64] |= mask
		i += bits
		n -= int(bits)
	}
}

// isData reports whether the line at ring offset off may hold data.
func (d dirtyLines) isData(off uint64) bool {
	i := off / lineBytes
	return d[i/64]&(1<<(i%64)) != 0
}
