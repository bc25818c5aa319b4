//go:build amd64 && !purego

#include "textflag.h"

// 16-bit float conversions and sums, the bits of half.go's scalar loops:
// bfloat16 with AVX2 (a widened element is the 16 bits shifted up; rounding
// to nearest even is (b + 0x7FFF + (b>>16)&1) >> 16, NaNs made 0x7FC0),
// float16 with F16C (VCVTPH2PS; VCVTPS2PH rounding to nearest even, NaNs
// made sign | 0x7FC00000 first, which converts to NewFloat16's
// sign | 0x7E00).

// Loading eight 16-bit elements from (SI)(AX*2) as float32 into Y0.
#define LOADBF16 VPMOVZXWD (SI)(AX*2), Y0; VPSLLD $16, Y0, Y0
#define LOADF16 VCVTPH2PS (SI)(AX*2), Y0

// EIGHT runs OP on Y0, eight elements of src widened, and dst's eight at
// (DI)(AX*4), until n are done.
#define EIGHT(NAME, LOAD, OP) \
TEXT NAME(SB), NOSPLIT, $0-24 \
	MOVQ	dst+0(FP), DI \
	MOVQ	src+8(FP), SI \
	MOVQ	n+16(FP), CX \
	XORQ	AX, AX \
loop: \
	LOAD \
	OP \
	ADDQ	$8, AX \
	CMPQ	AX, CX \
	JB	loop \
	VZEROUPPER \
	RET

// Widening stores Y0; accumulating adds it to dst, which is the first
// operand, as in the scalar loop.
#define STORE VMOVUPS Y0, (DI)(AX*4)
#define ADD VMOVUPS (DI)(AX*4), Y1; VADDPS Y0, Y1, Y1; VMOVUPS Y1, (DI)(AX*4)

// func widenBF16(dst *float32, src *BFloat16, n int)
EIGHT(·widenBF16, LOADBF16, STORE)

// func widenF16(dst *float32, src *Float16, n int)
EIGHT(·widenF16, LOADF16, STORE)

// func accumulateBF16(dst *float32, src *BFloat16, n int)
EIGHT(·accumulateBF16, LOADBF16, ADD)

// func accumulateF16(dst *float32, src *Float16, n int)
EIGHT(·accumulateF16, LOADF16, ADD)

// BROADCAST sets every lane of Y to the 32-bit constant V (X is Y's low half).
#define BROADCAST(V, X, Y) MOVL $V, BX; VMOVD BX, X; VPBROADCASTD X, Y

// The constants of the rounding: |b|'s mask and infinity, then bfloat16's
// rounding bias, lowest kept bit and NaN, or float16's sign mask and the
// NaN it converts from.
#define CONSTSBF16 BROADCAST(0x7FFFFFFF, X8, Y8); BROADCAST(0x7F800000, X9, Y9); BROADCAST(0x7FFF, X10, Y10); BROADCAST(1, X11, Y11); BROADCAST(0x7FC0, X12, Y12)
#define CONSTSF16 BROADCAST(0x7FFFFFFF, X8, Y8); BROADCAST(0x7F800000, X9, Y9); BROADCAST(0x80000000, X10, Y10); BROADCAST(0x7FC00000, X11, Y11)

// ROUNDBF16 rounds the float32 bits in R to bfloat16 in the low half of
// each lane; T and M are scratch.
#define ROUNDBF16(R, T, M) \
	VPSRLD	$16, R, T \
	VPAND	Y11, T, T \
	VPADDD	Y10, T, T \
	VPADDD	R, T, T \
	VPSRLD	$16, T, T \
	VPAND	Y8, R, M \
	VPCMPGTD	Y9, M, M \
	VPBLENDVB	M, Y12, T, R

// STOREBF16 rounds Y0 and Y1 and stores them as sixteen words in order.
#define STOREBF16 \
	ROUNDBF16(Y0, Y2, Y3) \
	ROUNDBF16(Y1, Y4, Y5) \
	VPACKUSDW	Y1, Y0, Y0 \
	VPERMQ	$0xD8, Y0, Y0 \
	VMOVDQU	Y0, (DI)(AX*2)

// ROUNDF16 stores R rounded to float16 at D, its NaN lanes (|b| >
// 0x7F800000) made sign | 0x7FC00000 first; T and M are scratch.
#define ROUNDF16(R, D, T, M) \
	VPAND	Y8, R, M \
	VPCMPGTD	Y9, M, M \
	VPAND	Y10, R, T \
	VPOR	Y11, T, T \
	VPBLENDVB	M, T, R, R \
	VCVTPS2PH	$0, R, D

#define STOREF16 \
	ROUNDF16(Y0, (DI)(AX*2), Y2, Y3) \
	ROUNDF16(Y1, 16(DI)(AX*2), Y4, Y5)

// NARROW: dst[i] = src[i] rounded, sixteen at a time; DIV divides Y0 and
// Y1 by the divisor SETUP put in Y13 (as the scalar loop divides before
// it rounds), or is empty.
#define NARROW(NAME, ARGS, SETUP, DIV, CONSTS, STORE) \
TEXT NAME(SB), NOSPLIT, ARGS \
	MOVQ	dst+0(FP), DI \
	MOVQ	src+8(FP), SI \
	MOVQ	n+16(FP), CX \
	SETUP \
	CONSTS \
	XORQ	AX, AX \
loop: \
	VMOVUPS	(SI)(AX*4), Y0 \
	VMOVUPS	32(SI)(AX*4), Y1 \
	DIV \
	STORE \
	ADDQ	$16, AX \
	CMPQ	AX, CX \
	JB	loop \
	VZEROUPPER \
	RET

#define NOTHING
#define LOADDIV VBROADCASTSS div+24(FP), Y13
#define DIVIDE VDIVPS Y13, Y0, Y0; VDIVPS Y13, Y1, Y1

// func narrowBF16(dst *BFloat16, src *float32, n int)
NARROW(·narrowBF16, $0-24, NOTHING, NOTHING, CONSTSBF16, STOREBF16)

// func narrowDivBF16(dst *BFloat16, src *float32, n int, div float32)
NARROW(·narrowDivBF16, $0-28, LOADDIV, DIVIDE, CONSTSBF16, STOREBF16)

// func narrowF16(dst *Float16, src *float32, n int)
NARROW(·narrowF16, $0-24, NOTHING, NOTHING, CONSTSF16, STOREF16)

// func narrowDivF16(dst *Float16, src *float32, n int, div float32)
NARROW(·narrowDivF16, $0-28, LOADDIV, DIVIDE, CONSTSF16, STOREF16)
