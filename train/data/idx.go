package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/klauspost/compress/gzip"
)

// IDX is one MNIST-format file: an unsigned-byte array with its dimensions.
type IDX struct {
	Dims []int
	Data []byte
}

// maxIDXBytes bounds what a header may ask for, so a corrupt size cannot
// make us allocate terabytes.
const maxIDXBytes = 1 << 34

// ReadIDX reads an IDX file of unsigned bytes (type 0x08), plain or
// gzip-compressed (detected from its first bytes, not its name). Errors name
// the file and the offset in the (decompressed) data where it went wrong.
func ReadIDX(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := maybeGunzip(bufio.NewReaderSize(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	idx, err := parseIDX(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return idx, nil
}

// maybeGunzip returns a reader of the decompressed stream when br starts
// with the gzip magic bytes, else br itself.
func maybeGunzip(br *bufio.Reader) (io.Reader, error) {
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip header: %w", err)
		}
		return zr, nil
	}
	return br, nil
}

// countingReader counts the bytes read through it, for error offsets.
type countingReader struct {
	r   io.Reader
	off int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.off += int64(n)
	return n, err
}

func parseIDX(r io.Reader) (*IDX, error) {
	cr := &countingReader{r: r}
	var hdr [4]byte
	if _, err := io.ReadFull(cr, hdr[:]); err != nil {
		return nil, fmt.Errorf("IDX magic at offset 0: %w", noEOF(err))
	}
	if hdr[0] != 0 || hdr[1] != 0 {
		return nil, fmt.Errorf("not an IDX file: magic % x at offset 0 (want 00 00 08 <dims>)", hdr)
	}
	if hdr[2] != 0x08 {
		return nil, fmt.Errorf("IDX element type %#02x at offset 2: only unsigned bytes (0x08) are supported", hdr[2])
	}
	ndims := int(hdr[3])
	if ndims < 1 || ndims > 4 {
		return nil, fmt.Errorf("IDX dimension count %d at offset 3: want 1 to 4", ndims)
	}
	idx := &IDX{Dims: make([]int, ndims)}
	size := int64(1)
	for d := range idx.Dims {
		off := cr.off
		if _, err := io.ReadFull(cr, hdr[:]); err != nil {
			return nil, fmt.Errorf("IDX dimension %d at offset %d: %w", d, off, noEOF(err))
		}
		idx.Dims[d] = int(binary.BigEndian.Uint32(hdr[:]))
		if idx.Dims[d] > 0 && size > maxIDXBytes/int64(idx.Dims[d]) {
			return nil, fmt.Errorf("IDX dimensions %v at offset 4 describe more than %d bytes", idx.Dims[:d+1], int64(maxIDXBytes))
		}
		size *= int64(idx.Dims[d])
	}
	start := cr.off
	// Grow as the data arrives, so a header claiming gigabytes in a small
	// corrupt file fails on the short read, not on the allocation.
	idx.Data = make([]byte, 0, min(size, 64<<20))
	var n int
	var err error
	for int64(len(idx.Data)) < size && err == nil {
		chunk := int(min(size-int64(len(idx.Data)), 64<<20))
		idx.Data = slices.Grow(idx.Data, chunk)
		var m int
		m, err = io.ReadFull(cr, idx.Data[len(idx.Data):len(idx.Data)+chunk])
		idx.Data = idx.Data[:len(idx.Data)+m]
		n += m
	}
	if err != nil {
		return nil, fmt.Errorf("truncated: dimensions %v need %d data bytes from offset %d, got %d (data ends at offset %d): %w",
			idx.Dims, size, start, n, start+int64(n), noEOF(err))
	}
	// Trailing bytes mean the header lied about the size.
	// Reading on to the end also verifies a gzip stream's checksum.
	var one [1]byte
	switch m, err := io.ReadFull(cr, one[:]); {
	case m > 0:
		return nil, fmt.Errorf("unexpected data after offset %d: dimensions %v account for %d bytes", start+size, idx.Dims, size)
	case err != io.EOF:
		return nil, fmt.Errorf("after the data at offset %d: %w", start+size, err)
	}
	return idx, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
