//go:build amd64 && !purego

#include "textflag.h"

// bfloat16 conversions with AVX2, the bits of half.go's scalar loops.

// func widenBF16(dst *float32, src *BFloat16, n int)
// dst[i] = src[i] << 16, eight at a time.
TEXT ·widenBF16(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	XORQ	AX, AX
widen:
	VPMOVZXWD	(SI)(AX*2), Y0
	VPSLLD	$16, Y0, Y0
	VMOVDQU	Y0, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JB	widen
	VZEROUPPER
	RET

// func accumulateBF16(acc *float32, src *BFloat16, n int)
// acc[i] += widened src[i], eight at a time; acc is the first operand,
// as in the scalar loop.
TEXT ·accumulateBF16(SB), NOSPLIT, $0-24
	MOVQ	acc+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	XORQ	AX, AX
acc:
	VPMOVZXWD	(SI)(AX*2), Y0
	VPSLLD	$16, Y0, Y0
	VMOVUPS	(DI)(AX*4), Y1
	VADDPS	Y0, Y1, Y1
	VMOVUPS	Y1, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JB	acc
	VZEROUPPER
	RET

// ROUND rounds the float32 bits in R to bfloat16 in the low half of each
// lane, ties to even, NaNs to 0x7FC0 (NewBFloat16): (b + 0x7FFF +
// (b>>16)&1) >> 16, then the NaN lanes — |b| > 0x7F800000 — replaced.
// T and M are scratch.
#define ROUND(R, T, M) \
	VPSRLD	$16, R, T \
	VPAND	Y11, T, T \
	VPADDD	Y10, T, T \
	VPADDD	R, T, T \
	VPSRLD	$16, T, T \
	VPAND	Y8, R, M \
	VPCMPGTD	Y9, M, M \
	VPBLENDVB	M, Y12, T, R

// NARROW is the loop of narrowBF16 (DIV empty) and narrowDivBF16 (DIV
// dividing Y0 and Y1 by the divisor in Y13 first, as the scalar loop
// divides before it rounds): sixteen at a time, two vectors rounded,
// packed to words and put back in order.
#define NARROW(NAME, ARGS, SETUP, DIV) \
TEXT NAME(SB), NOSPLIT, ARGS \
	MOVQ	dst+0(FP), DI \
	MOVQ	src+8(FP), SI \
	MOVQ	n+16(FP), CX \
	SETUP \
	MOVL	$0x7FFFFFFF, BX \
	VMOVD	BX, X8 \
	VPBROADCASTD	X8, Y8 \
	MOVL	$0x7F800000, BX \
	VMOVD	BX, X9 \
	VPBROADCASTD	X9, Y9 \
	MOVL	$0x7FFF, BX \
	VMOVD	BX, X10 \
	VPBROADCASTD	X10, Y10 \
	MOVL	$1, BX \
	VMOVD	BX, X11 \
	VPBROADCASTD	X11, Y11 \
	MOVL	$0x7FC0, BX \
	VMOVD	BX, X12 \
	VPBROADCASTD	X12, Y12 \
	XORQ	AX, AX \
loop: \
	VMOVDQU	(SI)(AX*4), Y0 \
	VMOVDQU	32(SI)(AX*4), Y1 \
	DIV \
	ROUND(Y0, Y2, Y3) \
	ROUND(Y1, Y4, Y5) \
	VPACKUSDW	Y1, Y0, Y0 \
	VPERMQ	$0xD8, Y0, Y0 \
	VMOVDQU	Y0, (DI)(AX*2) \
	ADDQ	$16, AX \
	CMPQ	AX, CX \
	JB	loop \
	VZEROUPPER \
	RET

#define NOTHING
#define LOADDIV VBROADCASTSS div+24(FP), Y13
#define DIVIDE VDIVPS Y13, Y0, Y0; VDIVPS Y13, Y1, Y1

// func narrowBF16(dst *BFloat16, src *float32, n int)
NARROW(·narrowBF16, $0-24, NOTHING, NOTHING)

// func narrowDivBF16(dst *BFloat16, src *float32, n int, div float32)
NARROW(·narrowDivBF16, $0-28, LOADDIV, DIVIDE)

// float16 conversions with F16C (VCVTPH2PS, VCVTPS2PH rounding to nearest
// even), the bits of half.go's scalar loops: NaNs are first made
// sign | 0x7FC00000, which converts to NewFloat16's sign | 0x7E00.

// func widenF16(dst *float32, src *Float16, n int)
TEXT ·widenF16(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	XORQ	AX, AX
widen:
	VCVTPH2PS	(SI)(AX*2), Y0
	VMOVUPS	Y0, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JB	widen
	VZEROUPPER
	RET

// func accumulateF16(acc *float32, src *Float16, n int)
TEXT ·accumulateF16(SB), NOSPLIT, $0-24
	MOVQ	acc+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	XORQ	AX, AX
acc:
	VCVTPH2PS	(SI)(AX*2), Y0
	VMOVUPS	(DI)(AX*4), Y1
	VADDPS	Y0, Y1, Y1
	VMOVUPS	Y1, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JB	acc
	VZEROUPPER
	RET

// ROUND16 stores R rounded to float16 at D: NaN lanes (|b| > 0x7F800000)
// made sign | 0x7FC00000 first. T and M are scratch.
#define ROUND16(R, D, T, M) \
	VPAND	Y8, R, M \
	VPCMPGTD	Y9, M, M \
	VPAND	Y10, R, T \
	VPOR	Y11, T, T \
	VPBLENDVB	M, T, R, R \
	VCVTPS2PH	$0, R, D

#define NARROW16(NAME, ARGS, SETUP, DIV) \
TEXT NAME(SB), NOSPLIT, ARGS \
	MOVQ	dst+0(FP), DI \
	MOVQ	src+8(FP), SI \
	MOVQ	n+16(FP), CX \
	SETUP \
	MOVL	$0x7FFFFFFF, BX \
	VMOVD	BX, X8 \
	VPBROADCASTD	X8, Y8 \
	MOVL	$0x7F800000, BX \
	VMOVD	BX, X9 \
	VPBROADCASTD	X9, Y9 \
	MOVL	$0x80000000, BX \
	VMOVD	BX, X10 \
	VPBROADCASTD	X10, Y10 \
	MOVL	$0x7FC00000, BX \
	VMOVD	BX, X11 \
	VPBROADCASTD	X11, Y11 \
	XORQ	AX, AX \
loop: \
	VMOVUPS	(SI)(AX*4), Y0 \
	VMOVUPS	32(SI)(AX*4), Y1 \
	DIV \
	ROUND16(Y0, (DI)(AX*2), Y2, Y3) \
	ROUND16(Y1, 16(DI)(AX*2), Y4, Y5) \
	ADDQ	$16, AX \
	CMPQ	AX, CX \
	JB	loop \
	VZEROUPPER \
	RET

// func narrowF16(dst *Float16, src *float32, n int)
NARROW16(·narrowF16, $0-24, NOTHING, NOTHING)

// func narrowDivF16(dst *Float16, src *float32, n int, div float32)
NARROW16(·narrowDivF16, $0-28, LOADDIV, DIVIDE)
