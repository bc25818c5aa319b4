#include "textflag.h"

// func interleave4AVX2(dst *float32, width int, src *float32, stride, kc int, alpha float32)
//
// interleave4's AVX2 form (pack_amd64.go): for l < kc, dst[l·width + r] =
// alpha·src[r·stride + l], r < 4. Eight columns at a time: four rows of
// eight are scaled, transposed in registers into eight groups of four
// (unpack low/high, then shuffle) and stored 16 bytes each; the last
// kc mod 8 columns one at a time. Every value is one float32 product,
// so the result is the same bits as the Go loop's.
TEXT ·interleave4AVX2(SB), NOSPLIT, $0-44
	MOVQ	dst+0(FP), DI
	MOVQ	width+8(FP), R9
	SHLQ	$2, R9            // width in bytes
	MOVQ	src+16(FP), SI
	MOVQ	stride+24(FP), R8
	SHLQ	$2, R8            // stride in bytes
	MOVQ	kc+32(FP), CX
	VBROADCASTSS	alpha+40(FP), Y15
	LEAQ	(SI)(R8*1), R11   // row 1
	LEAQ	(SI)(R8*2), R12   // row 2
	LEAQ	(R11)(R8*2), R13  // row 3
	LEAQ	(R9)(R9*2), R10   // 3·width bytes
	XORQ	AX, AX            // column index
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	tail

eight:
	VMULPS	(SI)(AX*4), Y15, Y0
	VMULPS	(R11)(AX*4), Y15, Y1
	VMULPS	(R12)(AX*4), Y15, Y2
	VMULPS	(R13)(AX*4), Y15, Y3
	VUNPCKLPS	Y1, Y0, Y4 // a0 b0 a1 b1 | a4 b4 a5 b5
	VUNPCKHPS	Y1, Y0, Y5 // a2 b2 a3 b3 | a6 b6 a7 b7
	VUNPCKLPS	Y3, Y2, Y6 // c0 d0 c1 d1 | c4 d4 c5 d5
	VUNPCKHPS	Y3, Y2, Y7 // c2 d2 c3 d3 | c6 d6 c7 d7
	VSHUFPS	$0x44, Y6, Y4, Y0 // column 0 | 4
	VSHUFPS	$0xEE, Y6, Y4, Y1 // column 1 | 5
	VSHUFPS	$0x44, Y7, Y5, Y2 // column 2 | 6
	VSHUFPS	$0xEE, Y7, Y5, Y3 // column 3 | 7
	VMOVUPS	X0, (DI)
	VMOVUPS	X1, (DI)(R9*1)
	VMOVUPS	X2, (DI)(R9*2)
	VMOVUPS	X3, (DI)(R10*1)
	LEAQ	(DI)(R9*4), BX
	VEXTRACTF128	$1, Y0, X4
	VEXTRACTF128	$1, Y1, X5
	VEXTRACTF128	$1, Y2, X6
	VEXTRACTF128	$1, Y3, X7
	VMOVUPS	X4, (BX)
	VMOVUPS	X5, (BX)(R9*1)
	VMOVUPS	X6, (BX)(R9*2)
	VMOVUPS	X7, (BX)(R10*1)
	LEAQ	(BX)(R9*4), DI
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	eight

tail:
	CMPQ	AX, CX
	JGE	done
	VMULSS	(SI)(AX*4), X15, X0
	VMULSS	(R11)(AX*4), X15, X1
	VMULSS	(R12)(AX*4), X15, X2
	VMULSS	(R13)(AX*4), X15, X3
	VMOVSS	X0, (DI)
	VMOVSS	X1, 4(DI)
	VMOVSS	X2, 8(DI)
	VMOVSS	X3, 12(DI)
	ADDQ	R9, DI
	INCQ	AX
	JMP	tail

done:
	VZEROUPPER
	RET

// func copyRowsAVX2(dst *float32, src *float32, stride, kc, width int)
//
// copyRows' AVX2 form (pack_amd64.go): for l < kc, the width floats
// (6, 12, 16 or 32) at src[l·stride] go to dst[l·width]: a packed panel
// of B read from rows of the untransposed matrix, or of A from columns of
// the transposed one. One call per panel instead
// of one copy per row, which spent more in the calls than in the copies
// (a tenth of a ResNet-50 forward at one thread).
TEXT ·copyRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	stride+16(FP), R8
	SHLQ	$2, R8            // stride in bytes
	MOVQ	kc+24(FP), CX
	MOVQ	width+32(FP), AX
	CMPQ	AX, $32
	JEQ	wide
	CMPQ	AX, $12
	JEQ	row12
	CMPQ	AX, $6
	JEQ	row6

row16:
	VMOVUPS	(SI), Y0
	VMOVUPS	32(SI), Y1
	VMOVUPS	Y0, (DI)
	VMOVUPS	Y1, 32(DI)
	ADDQ	R8, SI
	ADDQ	$64, DI
	DECQ	CX
	JNZ	row16
	VZEROUPPER
	RET

// Widths 12 and 6: a transposed A's panels of the AVX-512 and AVX2
// micro-kernels' rows.
row12:
	VMOVUPS	(SI), Y0
	VMOVUPS	32(SI), X1
	VMOVUPS	Y0, (DI)
	VMOVUPS	X1, 32(DI)
	ADDQ	R8, SI
	ADDQ	$48, DI
	DECQ	CX
	JNZ	row12
	VZEROUPPER
	RET

row6:
	VMOVUPS	(SI), X0
	VMOVSD	16(SI), X1
	VMOVUPS	X0, (DI)
	VMOVSD	X1, 16(DI)
	ADDQ	R8, SI
	ADDQ	$24, DI
	DECQ	CX
	JNZ	row6
	VZEROUPPER
	RET

wide:
	VMOVUPS	(SI), Y0
	VMOVUPS	32(SI), Y1
	VMOVUPS	64(SI), Y2
	VMOVUPS	96(SI), Y3
	VMOVUPS	Y0, (DI)
	VMOVUPS	Y1, 32(DI)
	VMOVUPS	Y2, 64(DI)
	VMOVUPS	Y3, 96(DI)
	ADDQ	R8, SI
	ADDQ	$128, DI
	DECQ	CX
	JNZ	wide
	VZEROUPPER
	RET

// func interleave2AVX2(dst *float32, width int, src *float32, stride, kc int, alpha float32)
//
// interleave2's AVX2 form (pack_amd64.go): for l < kc, dst[l·width + r] =
// alpha·src[r·stride + l], r < 2 — the last two rows of the AVX2
// micro-kernel's six-row panels of A, which went one row at a time with a
// store every width floats. Eight columns at a time: two rows of eight
// are scaled, interleaved in registers into eight pairs (unpack low and
// high) and stored 8 bytes each; the last kc mod 8 columns one at a time.
// Every value is one float32 product: the Go loop's bits.
TEXT ·interleave2AVX2(SB), NOSPLIT, $0-44
	MOVQ	dst+0(FP), DI
	MOVQ	width+8(FP), R9
	SHLQ	$2, R9            // width in bytes
	MOVQ	src+16(FP), SI
	MOVQ	stride+24(FP), R8
	SHLQ	$2, R8            // stride in bytes
	MOVQ	kc+32(FP), CX
	VBROADCASTSS	alpha+40(FP), Y15
	LEAQ	(SI)(R8*1), R11   // row 1
	LEAQ	(R9)(R9*2), R10   // 3·width bytes
	XORQ	AX, AX            // column index
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	tail2

eight2:
	VMULPS	(SI)(AX*4), Y15, Y0
	VMULPS	(R11)(AX*4), Y15, Y1
	VUNPCKLPS	Y1, Y0, Y4 // a0 b0 a1 b1 | a4 b4 a5 b5
	VUNPCKHPS	Y1, Y0, Y5 // a2 b2 a3 b3 | a6 b6 a7 b7
	VMOVLPS	X4, (DI)
	VMOVHPS	X4, (DI)(R9*1)
	VMOVLPS	X5, (DI)(R9*2)
	VMOVHPS	X5, (DI)(R10*1)
	LEAQ	(DI)(R9*4), BX
	VEXTRACTF128	$1, Y4, X6
	VEXTRACTF128	$1, Y5, X7
	VMOVLPS	X6, (BX)
	VMOVHPS	X6, (BX)(R9*1)
	VMOVLPS	X7, (BX)(R9*2)
	VMOVHPS	X7, (BX)(R10*1)
	LEAQ	(BX)(R9*4), DI
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	eight2

tail2:
	CMPQ	AX, CX
	JGE	done2
	VMULSS	(SI)(AX*4), X15, X0
	VMULSS	(R11)(AX*4), X15, X1
	VMOVSS	X0, (DI)
	VMOVSS	X1, 4(DI)
	ADDQ	R9, DI
	INCQ	AX
	JMP	tail2

done2:
	VZEROUPPER
	RET
