package cuda

import (
	"fmt"
	"regexp"
	"strconv"
)

// Version is a CUDA version as the driver reports it: 1000·major + 10·minor
// (12040 is CUDA 12.4).
type Version int

// Major is the major version.
func (v Version) Major() int { return int(v) / 1000 }

// Minor is the minor version.
func (v Version) Minor() int { return int(v) % 1000 / 10 }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major(), v.Minor()) }

var ptxVersionLine = regexp.MustCompile(`(?m)^\s*\.version\s+(\d+)\.(\d+)\s*$`)

// PTXNeeds returns the oldest driver that can compile PTX text, from its
// .version directive: PTX ISA 7.x came with CUDA 11.x, 8.0–8.5 with
// 12.0–12.5, 8.6 with 12.7, 8.7 with 12.8, 8.8 with 12.9, and 9.x with 13.x.
func PTXNeeds(ptx []byte) (Version, error) {
	m := ptxVersionLine.FindSubmatch(ptx)
	if m == nil {
		return 0, fmt.Errorf("cuda: PTX has no .version directive")
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	switch {
	case major == 8 && minor >= 6:
		return Version(12000 + (minor+1)*10), nil
	case major >= 7:
		return Version((major+4)*1000 + minor*10), nil
	default:
		return 0, fmt.Errorf("cuda: PTX ISA %d.%d is older than any supported driver", major, minor)
	}
}
