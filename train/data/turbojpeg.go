package data

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// turboJPEG decodes JPEG images with libjpeg-turbo's TurboJPEG API, loaded
// at run time (no cgo): the library Pillow decodes JPEG with, so images
// come out as Pillow's to the byte, several times faster than Go's
// image/jpeg. A handle serves one goroutine at a time.
type turboJPEG struct {
	path string
	h    uintptr
	// Entry points, called with purego.SyscallN (no allocation per call).
	init, header, decompress, destroy uintptr
	errorStr                          func(h uintptr) string
}

// The TurboJPEG constants used (turbojpeg.h, libjpeg-turbo 2.x).
const (
	tjPixelRGB  = 0 // TJPF_RGB
	tjSpaceCMYK = 3 // TJCS_CMYK
	tjSpaceYCCK = 4 // TJCS_YCCK
)

// turboLibraries are the names TurboJPEG is looked for under.
var turboLibraries = []string{"libturbojpeg.so.0", "libturbojpeg.so"}

// openTurboJPEG loads TurboJPEG (GORUN_TURBOJPEG names the library file
// when set) and makes a decompressor.
func openTurboJPEG() (*turboJPEG, error) {
	// The loader's error message (dlerror) is kept per thread: purego
	// reads it after dlopen or dlsym fails, which must be on the same one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	names := turboLibraries
	if p := os.Getenv("GORUN_TURBOJPEG"); p != "" {
		names = []string{p}
	}
	var lib uintptr
	var t turboJPEG
	var err error
	for _, n := range names {
		if lib, err = purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
			t.path = n
			break
		}
	}
	if lib == 0 {
		return nil, fmt.Errorf("TurboJPEG (libjpeg-turbo) not found (tried %v: %v); Debian: apt-get install libturbojpeg0", names, err)
	}
	for _, f := range []struct {
		name string
		at   *uintptr
	}{{"tjInitDecompress", &t.init}, {"tjDecompressHeader3", &t.header}, {"tjDecompress2", &t.decompress},
		{"tjGetErrorStr2", new(uintptr)}, {"tjDestroy", &t.destroy}} {
		if *f.at, err = purego.Dlsym(lib, f.name); err != nil {
			return nil, fmt.Errorf("%s: %w", t.path, err)
		}
	}
	purego.RegisterLibFunc(&t.errorStr, lib, "tjGetErrorStr2")
	if t.h, _, _ = purego.SyscallN(t.init); t.h == 0 {
		return nil, fmt.Errorf("%s: tjInitDecompress failed", t.path)
	}
	return &t, nil
}

// fail returns the handle's last error, and replaces the handle with a
// fresh one. A call that fails can leave libjpeg-turbo's decompressor
// inside the image it gave up on: after a header cut short, or one
// declaring more than its 65,500 pixels a side, every later image of
// the handle failed too ("Invalid JPEG file structure: two SOI markers",
// or a header of 0×0 pixels) — one bad file made a loader worker refuse
// all it read after it.
func (t *turboJPEG) fail() error {
	err := t.err()
	t.close()
	t.h, _, _ = purego.SyscallN(t.init) // 0 when it fails: decode says so
	return err
}

// decode decodes the JPEG image in b into RGB, in m's pixel buffer when
// it is large enough (m may be nil). It returns nil and no error for CMYK
// and YCCK images, whose conversion Go's decoder does as Pillow does;
// an error for images of more than maxPixels pixels.
func (t *turboJPEG) decode(b []byte, m *RGB, maxPixels int) (*RGB, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	if t.h == 0 {
		return nil, fmt.Errorf("%s: no decompressor (tjInitDecompress failed)", t.path)
	}
	var w, h, subsamp, space int32
	if r, _, _ := purego.SyscallN(t.header, t.h, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		uintptr(unsafe.Pointer(&w)), uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&subsamp)), uintptr(unsafe.Pointer(&space))); int32(r) != 0 {
		return nil, t.fail()
	}
	if space == tjSpaceCMYK || space == tjSpaceYCCK {
		return nil, nil
	}
	if err := checkImageSize(int(w), int(h), maxPixels); err != nil {
		return nil, err
	}
	m = fitRGB(m, int(w), int(h))
	// Flags 0: the accurate integer IDCT and smooth chroma upsampling, as
	// Pillow has them; a warning (corrupt data) fails as an error does.
	if r, _, _ := purego.SyscallN(t.decompress, t.h, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		uintptr(unsafe.Pointer(&m.Pix[0])), uintptr(w), uintptr(3*w), uintptr(h), tjPixelRGB, 0); int32(r) != 0 {
		return nil, t.fail()
	}
	return m, nil
}

// err is the handle's last error.
func (t *turboJPEG) err() error { return fmt.Errorf("libjpeg-turbo: %s", t.errorStr(t.h)) }

// close frees the decompressor.
func (t *turboJPEG) close() {
	if t.h != 0 {
		purego.SyscallN(t.destroy, t.h)
		t.h = 0
	}
}
