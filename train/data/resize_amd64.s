//go:build amd64 && !purego

#include "textflag.h"

// The resampling passes' sums (resize.go), in AVX2: each sample widened
// to 32 bits, multiplied by its tap's fixed-point weight and added to
// Pillow's rounding half, then shifted right by precisionBits and
// saturated to 0–255 (VPACKSSDW, VPACKUSWB), which is clip8. The sums
// are the Go loops' integer sums (the weights are non-negative and the
// totals fit in 32 bits, as Pillow's), so the bytes are the same.

// half is 1 << (precisionBits-1).
#define HALF $0x200000

// func verticalRows(out, src *byte, stride int, coeffs *int32, taps, n int)
TEXT ·verticalRows(SB), NOSPLIT, $0-48
	MOVQ	out+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	stride+16(FP), R8
	MOVQ	coeffs+24(FP), R9
	MOVQ	taps+32(FP), R10
	MOVQ	n+40(FP), CX
	MOVL	HALF, AX
	VMOVD	AX, X15
	VPBROADCASTD	X15, Y15
	XORQ	DX, DX

vcols:
	VMOVDQU	Y15, Y0
	LEAQ	(SI)(DX*1), R11
	MOVQ	R9, R12
	MOVQ	R10, BX

vtap:
	VPMOVZXBD	(R11), Y1
	VPBROADCASTD	(R12), Y2
	VPMULLD	Y2, Y1, Y1
	VPADDD	Y1, Y0, Y0
	ADDQ	R8, R11
	ADDQ	$4, R12
	DECQ	BX
	JNZ	vtap

	VPSRAD	$22, Y0, Y0
	VEXTRACTI128	$1, Y0, X1
	VPACKSSDW	X1, X0, X0
	VPACKUSWB	X0, X0, X0
	VMOVQ	X0, (DI)(DX*1)
	ADDQ	$8, DX
	CMPQ	DX, CX
	JLT	vcols
	VZEROUPPER
	RET

// func horizontalPixels(out, row *byte, bounds *int, coeffs *int32, ksize, count int)
TEXT ·horizontalPixels(SB), NOSPLIT, $0-48
	MOVQ	out+0(FP), DI
	MOVQ	row+8(FP), SI
	MOVQ	bounds+16(FP), R8
	MOVQ	coeffs+24(FP), R9
	MOVQ	ksize+32(FP), R10
	MOVQ	count+40(FP), CX
	SHLQ	$2, R10
	MOVL	HALF, AX
	VMOVD	AX, X15
	VPBROADCASTD	X15, X15

hpixel:
	MOVQ	0(R8), AX
	MOVQ	8(R8), BX
	LEAQ	(AX)(AX*2), AX
	LEAQ	(SI)(AX*1), R11
	MOVQ	R9, R12
	VMOVDQU	X15, X0

htap:
	VPMOVZXBD	(R11), X1
	VPBROADCASTD	(R12), X2
	VPMULLD	X2, X1, X1
	VPADDD	X1, X0, X0
	ADDQ	$3, R11
	ADDQ	$4, R12
	DECQ	BX
	JNZ	htap

	VPSRAD	$22, X0, X0
	VPACKSSDW	X0, X0, X0
	VPACKUSWB	X0, X0, X0
	VMOVD	X0, AX
	MOVW	AX, (DI)
	SHRL	$16, AX
	MOVB	AX, 2(DI)
	ADDQ	$3, DI
	ADDQ	$16, R8
	ADDQ	R10, R9
	DECQ	CX
	JNZ	hpixel
	RET
