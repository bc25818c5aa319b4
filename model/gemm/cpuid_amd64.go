package gemm

import "encoding/binary"

// cpuid executes the CPUID instruction for leaf and sub-leaf sub.
//
//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// processor is what CPUID says a CPU is: its vendor ("AuthenticAMD",
// "GenuineIntel") and family and model as lscpu prints them.
type processor struct {
	vendor        string
	family, model uint32
}

// thisProcessor reads CPUID leaves 0 and 1.
func thisProcessor() processor {
	_, b, c, d := cpuid(0, 0)
	var v [12]byte
	binary.LittleEndian.PutUint32(v[0:], b)
	binary.LittleEndian.PutUint32(v[4:], d)
	binary.LittleEndian.PutUint32(v[8:], c)
	signature, _, _, _ := cpuid(1, 0)
	p := decodeSignature(signature)
	p.vendor = string(v[:])
	return p
}

// decodeSignature takes family and model from CPUID leaf 1's EAX: the
// extended family is added to family 15, and the extended model is the
// model's high nibble in families 6 and 15 and up.
func decodeSignature(eax uint32) processor {
	family, model := eax>>8&0xf, eax>>4&0xf
	if family == 0xf {
		family += eax >> 20 & 0xff
	}
	if family == 6 || family >= 0xf {
		model |= eax >> 16 & 0xf << 4
	}
	return processor{family: family, model: model}
}

// halfWidthAVX512 reports whether p runs AVX-512 on 256-bit datapaths,
// each 512-bit instruction in two halves: AMD's family 25 (Zen 4; its
// Zen 3 models have no AVX-512 at all). There the AVX-512 micro-kernel
// makes no more multiply-adds a cycle than the AVX2 one and packs wider
// panels, and the AVX2 kernel trained and inferred ResNet-50 faster
// (bench/kernels.sh; BENCHMARKS.md, Compute kernels).
func halfWidthAVX512(p processor) bool {
	return p.vendor == "AuthenticAMD" && p.family == 25
}
