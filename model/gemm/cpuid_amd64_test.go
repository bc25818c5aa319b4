package gemm

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestDecodeSignature: family and model from CPUID leaf 1's EAX, as lscpu
// prints them, for the host CPUs our machines have had.
func TestDecodeSignature(t *testing.T) {
	for _, c := range []struct {
		name          string
		eax           uint32
		family, model uint32
	}{
		{"zen3 milan", 0x00a00f11, 25, 1},
		{"zen4 genoa", 0x00a10f11, 25, 17},
		{"zen5 turin", 0x00b00f21, 26, 2},
		{"emerald rapids", 0x000c06f2, 6, 207},
		{"pentium 4", 0x00000f29, 15, 2},
		{"486", 0x00000435, 4, 3},
	} {
		p := decodeSignature(c.eax)
		if p.family != c.family || p.model != c.model {
			t.Errorf("%s (%#x): family %d model %d, want %d, %d", c.name, c.eax, p.family, p.model, c.family, c.model)
		}
	}
}

// TestThisProcessor: CPUID names the CPU /proc/cpuinfo names.
func TestThisProcessor(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("no /proc/cpuinfo to compare with: %v", err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(string(info), "\n") {
		if line == "" {
			break // the first processor's fields
		}
		k, v, _ := strings.Cut(line, ":")
		want[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	p := thisProcessor()
	if p.vendor != want["vendor_id"] || strconv.Itoa(int(p.family)) != want["cpu family"] || strconv.Itoa(int(p.model)) != want["model"] {
		t.Errorf("CPUID: %+v; /proc/cpuinfo: vendor %s, family %s, model %s", p, want["vendor_id"], want["cpu family"], want["model"])
	}
}

// TestKernelsFor: the widest kernel first, except AVX-512 behind AVX2 on
// a CPU that runs it in halves; the Go kernel always, last.
func TestKernelsFor(t *testing.T) {
	zen3 := processor{vendor: "AuthenticAMD", family: 25, model: 1}
	zen4 := processor{vendor: "AuthenticAMD", family: 25, model: 17}
	zen5 := processor{vendor: "AuthenticAMD", family: 26, model: 2}
	emerald := processor{vendor: "GenuineIntel", family: 6, model: 207}
	for _, c := range []struct {
		name         string
		avx512, avx2 bool
		p            processor
		want         string
	}{
		{"zen3", false, true, zen3, "avx2-fma go"},
		{"zen4", true, true, zen4, "avx2-fma avx512 go"},
		{"zen5", true, true, zen5, "avx512 avx2-fma go"},
		{"emerald rapids", true, true, emerald, "avx512 avx2-fma go"},
		{"no avx", false, false, zen4, "go"},
	} {
		var got []string
		for _, k := range kernelsFor(c.avx512, c.avx2, c.p) {
			got = append(got, k.id())
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %v, want %s", c.name, got, c.want)
		}
	}
}
