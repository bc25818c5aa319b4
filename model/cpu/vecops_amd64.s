//go:build amd64 && !purego

#include "textflag.h"

// The Winograd row kernels (vecops.go): each runs its operation over n ≥ 1
// elements with AVX2, eight at a time (YMM), then four (XMM), then one,
// index in AX; the kernels over rows do so for each of rows ≥ 1 rows (BX
// counts them down), moving their pointers by the strides, in bytes, of
// R11 and R12. Each computes exactly what the Go loop in vecops.go
// computes, in the same order, so the results are the same bits.
//
// Every instruction touching an XMM register is VEX-encoded (VMOVD, VMOVQ,
// not MOVL, MOVQ): one legacy-SSE move of a constant into X12 before the
// loop made rowPicks3Vector's whole loop 12× slower on the Intel host
// (family 6 model 207), the YMM registers' upper halves being dirty.

// ROWS runs BODY8, BODY4 and BODY1 over AX from 0 to CX (DX is scratch)
// for each of BX rows, running NEXT (the pointers' moves) between rows.
#define ROWS(BODY8, BODY4, BODY1, NEXT) \
row: \
	XORQ	AX, AX \
	MOVQ	CX, DX \
	ANDQ	$-8, DX \
	JZ	four \
eight: \
	BODY8 \
	ADDQ	$8, AX \
	CMPQ	AX, DX \
	JLT	eight \
four: \
	MOVQ	CX, DX \
	SUBQ	AX, DX \
	CMPQ	DX, $4 \
	JLT	one \
	BODY4 \
	ADDQ	$4, AX \
one: \
	CMPQ	AX, CX \
	JGE	next \
	BODY1 \
	INCQ	AX \
	JMP	one \
next: \
	NEXT \
	DECQ	BX \
	JNZ	row \
	VZEROUPPER \
	RET

// LOOPS is ROWS over one row.
#define NOTHING
#define LOOPS(BODY8, BODY4, BODY1) \
	MOVQ	$1, BX \
	ROWS(BODY8, BODY4, BODY1, NOTHING)

// y0 = x0 − x2, y1 = x1 + x2, y2 = x2 − x1, y3 = x1 − x3.
// BT4STORE computes it from A, B, C, D and stores it; BT4 loads them from
// R10 … R13 first.
#define BT4STORE(MOV, SUB, ADD, A, B, C, D, E, F, G, H) \
	SUB	C, A, E \
	ADD	C, B, F \
	SUB	B, C, G \
	SUB	D, B, H \
	MOV	E, (DI)(AX*4) \
	MOV	F, (SI)(AX*4) \
	MOV	G, (R8)(AX*4) \
	MOV	H, (R9)(AX*4)

#define BT4(MOV, SUB, ADD, A, B, C, D, E, F, G, H) \
	MOV	(R10)(AX*4), A \
	MOV	(R11)(AX*4), B \
	MOV	(R12)(AX*4), C \
	MOV	(R13)(AX*4), D \
	BT4STORE(MOV, SUB, ADD, A, B, C, D, E, F, G, H)

#define BT4_8 BT4(VMOVUPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)
#define BT4_4 BT4(VMOVUPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5, X6, X7)
#define BT4_1 BT4(VMOVSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5, X6, X7)

// func bt4Vector(y0, y1, y2, y3, x0, x1, x2, x3 *float32, n int)
TEXT ·bt4Vector(SB), NOSPLIT, $0-72
	MOVQ	y0+0(FP), DI
	MOVQ	y1+8(FP), SI
	MOVQ	y2+16(FP), R8
	MOVQ	y3+24(FP), R9
	MOVQ	x0+32(FP), R10
	MOVQ	x1+40(FP), R11
	MOVQ	x2+48(FP), R12
	MOVQ	x3+56(FP), R13
	MOVQ	n+64(FP), CX
	LOOPS(BT4_8, BT4_4, BT4_1)

// y0 = (x0 + x1) + x2, y1 = (x1 − x2) − x3.
#define AT2(MOV, SUB, ADD, A, B, C, D, E, F) \
	MOV	(R8)(AX*4), A \
	MOV	(R9)(AX*4), B \
	MOV	(R10)(AX*4), C \
	MOV	(R11)(AX*4), D \
	ADD	B, A, E \
	ADD	C, E, E \
	SUB	C, B, F \
	SUB	D, F, F \
	MOV	E, (DI)(AX*4) \
	MOV	F, (SI)(AX*4)

#define AT2_8 AT2(VMOVUPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5)
#define AT2_4 AT2(VMOVUPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5)
#define AT2_1 AT2(VMOVSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5)

// func at2Vector(y0, y1, x0, x1, x2, x3 *float32, n int)
TEXT ·at2Vector(SB), NOSPLIT, $0-56
	MOVQ	y0+0(FP), DI
	MOVQ	y1+8(FP), SI
	MOVQ	x0+16(FP), R8
	MOVQ	x1+24(FP), R9
	MOVQ	x2+32(FP), R10
	MOVQ	x3+40(FP), R11
	MOVQ	n+48(FP), CX
	LOOPS(AT2_8, AT2_4, AT2_1)

// y0 = x0, y1 = x0 + x1, y2 = x0 − x1, y3 = −x1 (the sign bit flipped with
// the mask in Y15, as Go's negation does).
#define A4(MOV, SUB, ADD, A, B, C, D, E, M) \
	MOV	(R10)(AX*4), A \
	MOV	(R11)(AX*4), B \
	ADD	B, A, C \
	SUB	B, A, D \
	VXORPS	M, B, E \
	MOV	A, (DI)(AX*4) \
	MOV	C, (SI)(AX*4) \
	MOV	D, (R8)(AX*4) \
	MOV	E, (R9)(AX*4)

#define A4_8 A4(VMOVUPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y15)
#define A4_4 A4(VMOVUPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X15)
#define A4_1 A4(VMOVSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X15)

// func a4Vector(y0, y1, y2, y3, x0, x1 *float32, n int)
TEXT ·a4Vector(SB), NOSPLIT, $0-56
	MOVQ	y0+0(FP), DI
	MOVQ	y1+8(FP), SI
	MOVQ	y2+16(FP), R8
	MOVQ	y3+24(FP), R9
	MOVQ	x0+32(FP), R10
	MOVQ	x1+40(FP), R11
	MOVQ	n+48(FP), CX
	VPCMPEQD	Y15, Y15, Y15
	VPSLLD	$31, Y15, Y15
	LOOPS(A4_8, A4_4, A4_1)

// y0 = x0, y1 = 0.5·((x0 + x1) + x2), y2 = 0.5·((x0 − x1) + x2), y3 = x2;
// x0, x1, x2 at R10, R11, R12; 0.5 broadcast in HALF.
#define G4(MOV, ADD, SUB, MUL, A, B, C, D, E, HALF) \
	MOV	(R10)(AX*4), A \
	MOV	(R11)(AX*4), B \
	MOV	(R12)(AX*4), C \
	ADD	B, A, D \
	ADD	C, D, D \
	MUL	HALF, D, D \
	SUB	B, A, E \
	ADD	C, E, E \
	MUL	HALF, E, E \
	MOV	A, (DI)(AX*4) \
	MOV	D, (SI)(AX*4) \
	MOV	E, (R8)(AX*4) \
	MOV	C, (R9)(AX*4)

#define G4_8 G4(VMOVUPS, VADDPS, VSUBPS, VMULPS, Y0, Y1, Y2, Y3, Y4, Y15)
#define G4_4 G4(VMOVUPS, VADDPS, VSUBPS, VMULPS, X0, X1, X2, X3, X4, X15)
#define G4_1 G4(VMOVSS, VADDSS, VSUBSS, VMULSS, X0, X1, X2, X3, X4, X15)

// func g4Vector(y0, y1, y2, y3, x0, x1, x2 *float32, n int)
TEXT ·g4Vector(SB), NOSPLIT, $0-64
	MOVQ	y0+0(FP), DI
	MOVQ	y1+8(FP), SI
	MOVQ	y2+16(FP), R8
	MOVQ	y3+24(FP), R9
	MOVQ	x0+32(FP), R10
	MOVQ	x1+40(FP), R11
	MOVQ	x2+48(FP), R12
	MOVQ	n+56(FP), CX
	MOVL	$0x3f000000, R13 // 0.5
	VMOVD	R13, X15
	VBROADCASTSS	X15, Y15
	LOOPS(G4_8, G4_4, G4_1)

// hbt4: a tile's four columns x[2j], x[2j+1], x[2j+2], x[2j+3] are the
// even and odd elements of x from 2j and from 2j + 2. SPLIT8 puts the even
// elements of the 16 at OFF(R10)(AX*8) into E and the odd ones into O:
// shuffles pick the even and the odd elements of each 128-bit lane of two
// vectors, and a permutation of 64-bit halves puts the lanes in order.
#define SPLIT8(OFF, E, O) \
	VMOVUPS	OFF(R10)(AX*8), Y8 \
	VMOVUPS	OFF+32(R10)(AX*8), Y9 \
	VSHUFPS	$0x88, Y9, Y8, E \
	VSHUFPS	$0xDD, Y9, Y8, O \
	VPERMPD	$0xD8, E, E \
	VPERMPD	$0xD8, O, O

#define SPLIT4(OFF, E, O) \
	VMOVUPS	OFF(R10)(AX*8), X8 \
	VMOVUPS	OFF+16(R10)(AX*8), X9 \
	VSHUFPS	$0x88, X9, X8, E \
	VSHUFPS	$0xDD, X9, X8, O

#define HBT4_8 \
	SPLIT8(0, Y0, Y1) \
	SPLIT8(8, Y2, Y3) \
	BT4STORE(VMOVUPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7)

#define HBT4_4 \
	SPLIT4(0, X0, X1) \
	SPLIT4(8, X2, X3) \
	BT4STORE(VMOVUPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5, X6, X7)

#define HBT4_1 \
	VMOVSS	(R10)(AX*8), X0 \
	VMOVSS	4(R10)(AX*8), X1 \
	VMOVSS	8(R10)(AX*8), X2 \
	VMOVSS	12(R10)(AX*8), X3 \
	BT4STORE(VMOVSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5, X6, X7)

#define HBT4_NEXT \
	ADDQ	R11, DI \
	ADDQ	R11, SI \
	ADDQ	R11, R8 \
	ADDQ	R11, R9 \
	ADDQ	R12, R10

// func hbt4Vector(y0, y1, y2, y3 *float32, ys int, x *float32, xs, n, rows int)
TEXT ·hbt4Vector(SB), NOSPLIT, $0-72
	MOVQ	y0+0(FP), DI
	MOVQ	y1+8(FP), SI
	MOVQ	y2+16(FP), R8
	MOVQ	y3+24(FP), R9
	MOVQ	ys+32(FP), R11
	SHLQ	$2, R11
	MOVQ	x+40(FP), R10
	MOVQ	xs+48(FP), R12
	SHLQ	$2, R12
	MOVQ	n+56(FP), CX
	MOVQ	rows+64(FP), BX
	ROWS(HBT4_8, HBT4_4, HBT4_1, HBT4_NEXT)

// e[j] = x[2j], o[j] = x[2j+1].
#define DEINTERLEAVE_8 \
	SPLIT8(0, Y0, Y1) \
	VMOVUPS	Y0, (DI)(AX*4) \
	VMOVUPS	Y1, (SI)(AX*4)

#define DEINTERLEAVE_4 \
	SPLIT4(0, X0, X1) \
	VMOVUPS	X0, (DI)(AX*4) \
	VMOVUPS	X1, (SI)(AX*4)

#define DEINTERLEAVE_1 \
	VMOVSS	(R10)(AX*8), X0 \
	VMOVSS	4(R10)(AX*8), X1 \
	VMOVSS	X0, (DI)(AX*4) \
	VMOVSS	X1, (SI)(AX*4)

#define DEINTERLEAVE_NEXT \
	ADDQ	R11, DI \
	ADDQ	R11, SI \
	ADDQ	R12, R10

// func deinterleaveVector(e, o *float32, es int, x *float32, xs, n, rows int)
TEXT ·deinterleaveVector(SB), NOSPLIT, $0-56
	MOVQ	e+0(FP), DI
	MOVQ	o+8(FP), SI
	MOVQ	es+16(FP), R11
	SHLQ	$2, R11
	MOVQ	x+24(FP), R10
	MOVQ	xs+32(FP), R12
	SHLQ	$2, R12
	MOVQ	n+40(FP), CX
	MOVQ	rows+48(FP), BX
	ROWS(DEINTERLEAVE_8, DEINTERLEAVE_4, DEINTERLEAVE_1, DEINTERLEAVE_NEXT)

// y[2j] = e[j] + b, y[2j+1] = o[j] + b, b broadcast in Y15: unpacking
// pairs the elements within each 128-bit lane, a permutation of lanes
// puts them in order.
#define INTERLEAVE_8 \
	VADDPS	(SI)(AX*4), Y15, Y0 \
	VADDPS	(R8)(AX*4), Y15, Y1 \
	VUNPCKLPS	Y1, Y0, Y2 \
	VUNPCKHPS	Y1, Y0, Y3 \
	VPERM2F128	$0x20, Y3, Y2, Y4 \
	VPERM2F128	$0x31, Y3, Y2, Y5 \
	VMOVUPS	Y4, (DI)(AX*8) \
	VMOVUPS	Y5, 32(DI)(AX*8)

#define INTERLEAVE_4 \
	VADDPS	(SI)(AX*4), X15, X0 \
	VADDPS	(R8)(AX*4), X15, X1 \
	VUNPCKLPS	X1, X0, X2 \
	VUNPCKHPS	X1, X0, X3 \
	VMOVUPS	X2, (DI)(AX*8) \
	VMOVUPS	X3, 16(DI)(AX*8)

#define INTERLEAVE_1 \
	VADDSS	(SI)(AX*4), X15, X0 \
	VADDSS	(R8)(AX*4), X15, X1 \
	VMOVSS	X0, (DI)(AX*8) \
	VMOVSS	X1, 4(DI)(AX*8)

#define INTERLEAVE_NEXT \
	ADDQ	R12, DI \
	ADDQ	R11, SI \
	ADDQ	R11, R8

// func interleaveVector(y *float32, ys int, e, o *float32, es int, b float32, n, rows int)
TEXT ·interleaveVector(SB), NOSPLIT, $0-64
	MOVQ	y+0(FP), DI
	MOVQ	ys+8(FP), R12
	SHLQ	$2, R12
	MOVQ	e+16(FP), SI
	MOVQ	o+24(FP), R8
	MOVQ	es+32(FP), R11
	SHLQ	$2, R11
	VBROADCASTSS	b+40(FP), Y15
	MOVQ	n+48(FP), CX
	MOVQ	rows+56(FP), BX
	ROWS(INTERLEAVE_8, INTERLEAVE_4, INTERLEAVE_1, INTERLEAVE_NEXT)

// y = x·scale + shift: scale in Y15, shift in Y14.
#define AFFINE(MOV, MUL, ADD, A, SCALE, SHIFT) \
	MOV	(SI)(AX*4), A \
	MUL	SCALE, A, A \
	ADD	SHIFT, A, A \
	MOV	A, (DI)(AX*4)

#define AFFINE_8 AFFINE(VMOVUPS, VMULPS, VADDPS, Y0, Y15, Y14)
#define AFFINE_4 AFFINE(VMOVUPS, VMULPS, VADDPS, X0, X15, X14)
#define AFFINE_1 AFFINE(VMOVSS, VMULSS, VADDSS, X0, X15, X14)

// func affineVector(y, x *float32, scale, shift float32, n int)
TEXT ·affineVector(SB), NOSPLIT, $0-32
	MOVQ	y+0(FP), DI
	MOVQ	x+8(FP), SI
	VBROADCASTSS	scale+16(FP), Y15
	VBROADCASTSS	shift+20(FP), Y14
	MOVQ	n+24(FP), CX
	LOOPS(AFFINE_8, AFFINE_4, AFFINE_1)

// out = (a·g + bx·(x − mu)) + d: a in Y15, bx in Y14, mu in Y13, d in
// Y12.
#define BNGRAD(MOV, MUL, ADD, SUB, G, X, A, B, C, D) \
	MOV	(SI)(AX*4), G \
	MOV	(R8)(AX*4), X \
	MUL	G, A, G \
	SUB	C, X, X \
	MUL	X, B, X \
	ADD	X, G, G \
	ADD	D, G, G \
	MOV	G, (DI)(AX*4)

#define BNGRAD_8 BNGRAD(VMOVUPS, VMULPS, VADDPS, VSUBPS, Y0, Y1, Y15, Y14, Y13, Y12)
#define BNGRAD_4 BNGRAD(VMOVUPS, VMULPS, VADDPS, VSUBPS, X0, X1, X15, X14, X13, X12)
#define BNGRAD_1 BNGRAD(VMOVSS, VMULSS, VADDSS, VSUBSS, X0, X1, X15, X14, X13, X12)

// func bnGradVector(out, dy, x *float32, a, bx, mu, d float32, n int)
TEXT ·bnGradVector(SB), NOSPLIT, $0-48
	MOVQ	out+0(FP), DI
	MOVQ	dy+8(FP), SI
	MOVQ	x+16(FP), R8
	VBROADCASTSS	a+24(FP), Y15
	VBROADCASTSS	bx+28(FP), Y14
	VBROADCASTSS	mu+32(FP), Y13
	VBROADCASTSS	d+36(FP), Y12
	MOVQ	n+40(FP), CX
	LOOPS(BNGRAD_8, BNGRAD_4, BNGRAD_1)

// The two sums of batch norm (vecops.go's moments and gradSums), in
// float64: eight elements at a time into two vectors of four partial
// sums per sum (elements 0–3 and 4–7), then four into the first, then
// one at a time into a ninth sum; vecops.go's lanes8 order combines them.
// Products are rounded before they are added (no FMA), as the Go loop's
// are.

// SUMS_COMBINE(LO, HI, TAIL, T) leaves lanes8(LO, HI) + TAIL in the low
// lane of LO's XMM register.
#define SUMS_COMBINE(LO, HI, XLO, TAIL, XT) \
	VADDPD	HI, LO, LO \
	VEXTRACTF128	$1, LO, XT \
	VADDPD	XT, XLO, XLO \
	VUNPCKHPD	XLO, XLO, XT \
	VADDSD	XT, XLO, XLO \
	VADDSD	TAIL, XLO, XLO

// func momentsVector(v *float32, n int, k float64) (float64, float64)
TEXT ·momentsVector(SB), NOSPLIT, $0-40
	MOVQ	v+0(FP), SI
	MOVQ	n+8(FP), CX
	VBROADCASTSD	k+16(FP), Y15
	VXORPD	Y8, Y8, Y8   // Σ(x − k), elements 0–3 of each eight
	VXORPD	Y9, Y9, Y9   // elements 4–7
	VXORPD	Y10, Y10, Y10 // Σ(x − k)², elements 0–3
	VXORPD	Y11, Y11, Y11 // elements 4–7
	VXORPD	X12, X12, X12 // the ninth sums
	VXORPD	X13, X13, X13
	XORQ	AX, AX
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	mfour
meight:
	VCVTPS2PD	(SI)(AX*4), Y0
	VCVTPS2PD	16(SI)(AX*4), Y1
	VSUBPD	Y15, Y0, Y0
	VSUBPD	Y15, Y1, Y1
	VADDPD	Y0, Y8, Y8
	VADDPD	Y1, Y9, Y9
	VMULPD	Y0, Y0, Y0
	VMULPD	Y1, Y1, Y1
	VADDPD	Y0, Y10, Y10
	VADDPD	Y1, Y11, Y11
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	meight
mfour:
	MOVQ	CX, DX
	SUBQ	AX, DX
	CMPQ	DX, $4
	JLT	mone
	VCVTPS2PD	(SI)(AX*4), Y0
	VSUBPD	Y15, Y0, Y0
	VADDPD	Y0, Y8, Y8
	VMULPD	Y0, Y0, Y0
	VADDPD	Y0, Y10, Y10
	ADDQ	$4, AX
mone:
	CMPQ	AX, CX
	JGE	mdone
	VCVTSS2SD	(SI)(AX*4), X0, X0
	VSUBSD	X15, X0, X0
	VADDSD	X0, X12, X12
	VMULSD	X0, X0, X0
	VADDSD	X0, X13, X13
	INCQ	AX
	JMP	mone
mdone:
	SUMS_COMBINE(Y8, Y9, X8, X12, X0)
	SUMS_COMBINE(Y10, Y11, X10, X13, X0)
	VMOVSD	X8, ret+24(FP)
	VMOVSD	X10, ret1+32(FP)
	VZEROUPPER
	RET

// GRAD_SUMS_8 adds gradients g (doubles, Y0 and Y1: elements 0–3 and
// 4–7) to Y8 and Y9 and g·(x − mean) (x in Y2 and Y3, the mean in Y15)
// to Y10 and Y11; GRAD_SUMS_4 the first half of it.
#define GRAD_SUMS_8 \
	VSUBPD	Y15, Y2, Y2 \
	VSUBPD	Y15, Y3, Y3 \
	VADDPD	Y0, Y8, Y8 \
	VADDPD	Y1, Y9, Y9 \
	VMULPD	Y2, Y0, Y0 \
	VMULPD	Y3, Y1, Y1 \
	VADDPD	Y0, Y10, Y10 \
	VADDPD	Y1, Y11, Y11

#define GRAD_SUMS_4 \
	VSUBPD	Y15, Y2, Y2 \
	VADDPD	Y0, Y8, Y8 \
	VMULPD	Y2, Y0, Y0 \
	VADDPD	Y0, Y10, Y10

// func gradSumsVector(x, dy *float32, n int, mean float64) (float64, float64)
TEXT ·gradSumsVector(SB), NOSPLIT, $0-48
	MOVQ	x+0(FP), SI
	MOVQ	dy+8(FP), DI
	MOVQ	n+16(FP), CX
	VBROADCASTSD	mean+24(FP), Y15
	VXORPD	Y8, Y8, Y8   // Σg, elements 0–3 of each eight
	VXORPD	Y9, Y9, Y9   // elements 4–7
	VXORPD	Y10, Y10, Y10 // Σg·(x − mean), elements 0–3
	VXORPD	Y11, Y11, Y11 // elements 4–7
	VXORPD	X12, X12, X12 // the ninth sums
	VXORPD	X13, X13, X13
	XORQ	AX, AX
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	gfour
geight:
	VCVTPS2PD	(DI)(AX*4), Y0
	VCVTPS2PD	16(DI)(AX*4), Y1
	VCVTPS2PD	(SI)(AX*4), Y2
	VCVTPS2PD	16(SI)(AX*4), Y3
	GRAD_SUMS_8
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	geight
gfour:
	MOVQ	CX, DX
	SUBQ	AX, DX
	CMPQ	DX, $4
	JLT	gone
	VCVTPS2PD	(DI)(AX*4), Y0
	VCVTPS2PD	(SI)(AX*4), Y2
	GRAD_SUMS_4
	ADDQ	$4, AX
gone:
	CMPQ	AX, CX
	JGE	gdone
	VCVTSS2SD	(DI)(AX*4), X0, X0
	VCVTSS2SD	(SI)(AX*4), X2, X2
	VSUBSD	X15, X2, X2
	VADDSD	X0, X12, X12
	VMULSD	X2, X0, X0
	VADDSD	X0, X13, X13
	INCQ	AX
	JMP	gone
gdone:
	SUMS_COMBINE(Y8, Y9, X8, X12, X0)
	SUMS_COMBINE(Y10, Y11, X10, X13, X0)
	VMOVSD	X8, ret+32(FP)
	VMOVSD	X10, ret1+40(FP)
	VZEROUPPER
	RET

// Batch norm with the relu after it fused in (vecops.go's affineReLU,
// gradSumsReLU and bnGradReLU). RELU_OF sets Y = reluOf(Z): Z > 0 ? Z :
// +0, then a NaN Z copied through; ZERO holds +0, T is scratch. RELU_PASS
// sets M to reluPasses(Z), all ones where !(Z <= 0): Z > 0 or NaN. The
// macros take every register, constants included, in the width of the
// operation (Y for eight, X for four and for one).
#define RELU_OF(MAX, CMP, Z, ZERO, Y, T) \
	MAX	ZERO, Z, Y \
	CMP	$3, Z, Z, T \
	VANDPS	Z, T, T \
	VORPS	T, Y, Y

#define RELU_PASS(CMP, Z, ZERO, M) \
	CMP	$6, ZERO, Z, M

// y = reluOf(x·scale + shift).
#define AFFINE_RELU(MOV, MUL, ADD, MAX, CMP, Z, Y, T, SCALE, SHIFT, ZERO) \
	MOV	(SI)(AX*4), Z \
	MUL	SCALE, Z, Z \
	ADD	SHIFT, Z, Z \
	RELU_OF(MAX, CMP, Z, ZERO, Y, T) \
	MOV	Y, (DI)(AX*4)

#define AFFINE_RELU_8 AFFINE_RELU(VMOVUPS, VMULPS, VADDPS, VMAXPS, VCMPPS, Y0, Y1, Y2, Y15, Y14, Y13)
#define AFFINE_RELU_4 AFFINE_RELU(VMOVUPS, VMULPS, VADDPS, VMAXPS, VCMPPS, X0, X1, X2, X15, X14, X13)
#define AFFINE_RELU_1 AFFINE_RELU(VMOVSS, VMULSS, VADDSS, VMAXSS, VCMPSS, X0, X1, X2, X15, X14, X13)

// func affineReLUVector(y, x *float32, scale, shift float32, n int)
TEXT ·affineReLUVector(SB), NOSPLIT, $0-32
	MOVQ	y+0(FP), DI
	MOVQ	x+8(FP), SI
	VBROADCASTSS	scale+16(FP), Y15
	VBROADCASTSS	shift+20(FP), Y14
	VXORPS	Y13, Y13, Y13
	MOVQ	n+24(FP), CX
	LOOPS(AFFINE_RELU_8, AFFINE_RELU_4, AFFINE_RELU_1)

// y = reluOf(a + b).
#define ADD_RELU(MOV, ADD, MAX, CMP, Z, Y, T, ZERO) \
	MOV	(SI)(AX*4), Z \
	ADD	(R8)(AX*4), Z, Z \
	RELU_OF(MAX, CMP, Z, ZERO, Y, T) \
	MOV	Y, (DI)(AX*4)

#define ADD_RELU_8 ADD_RELU(VMOVUPS, VADDPS, VMAXPS, VCMPPS, Y0, Y1, Y2, Y13)
#define ADD_RELU_4 ADD_RELU(VMOVUPS, VADDPS, VMAXPS, VCMPPS, X0, X1, X2, X13)
#define ADD_RELU_1 ADD_RELU(VMOVSS, VADDSS, VMAXSS, VCMPSS, X0, X1, X2, X13)

// func addReLUVector(y, a, b *float32, n int)
TEXT ·addReLUVector(SB), NOSPLIT, $0-32
	MOVQ	y+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), R8
	VXORPS	Y13, Y13, Y13
	MOVQ	n+24(FP), CX
	LOOPS(ADD_RELU_8, ADD_RELU_4, ADD_RELU_1)

// y = a + b.
#define ADD(MOV, OP, Z) \
	MOV	(SI)(AX*4), Z \
	OP	(R8)(AX*4), Z, Z \
	MOV	Z, (DI)(AX*4)

#define ADD_8 ADD(VMOVUPS, VADDPS, Y0)
#define ADD_4 ADD(VMOVUPS, VADDPS, X0)
#define ADD_1 ADD(VMOVSS, VADDSS, X0)

// func addVector(y, a, b *float32, n int)
TEXT ·addVector(SB), NOSPLIT, $0-32
	MOVQ	y+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), R8
	MOVQ	n+24(FP), CX
	LOOPS(ADD_8, ADD_4, ADD_1)

// out = (a·g + bx·(x − mu)) + d with g zeroed where the relu of x·scale +
// shift stops the gradient.
#define BNGRAD_RELU(MOV, MUL, ADD, SUB, MAX, CMP, G, X, Z, Y, T, A, B, MU, D, SCALE, SHIFT, ZERO) \
	MOV	(SI)(AX*4), G \
	MOV	(R8)(AX*4), X \
	MUL	SCALE, X, Z \
	ADD	SHIFT, Z, Z \
	RELU_PASS(CMP, Z, ZERO, Y) \
	VANDPS	Y, G, G \
	MUL	G, A, G \
	SUB	MU, X, X \
	MUL	X, B, X \
	ADD	X, G, G \
	ADD	D, G, G \
	MOV	G, (DI)(AX*4)

#define BNGRAD_RELU_8 BNGRAD_RELU(VMOVUPS, VMULPS, VADDPS, VSUBPS, VMAXPS, VCMPPS, Y0, Y1, Y2, Y3, Y4, Y15, Y14, Y13, Y12, Y11, Y10, Y9)
#define BNGRAD_RELU_4 BNGRAD_RELU(VMOVUPS, VMULPS, VADDPS, VSUBPS, VMAXPS, VCMPPS, X0, X1, X2, X3, X4, X15, X14, X13, X12, X11, X10, X9)
#define BNGRAD_RELU_1 BNGRAD_RELU(VMOVSS, VMULSS, VADDSS, VSUBSS, VMAXSS, VCMPSS, X0, X1, X2, X3, X4, X15, X14, X13, X12, X11, X10, X9)

// func bnGradReLUVector(out, dy, x *float32, a, bx, mu, d, scale, shift float32, n int)
TEXT ·bnGradReLUVector(SB), NOSPLIT, $0-56
	MOVQ	out+0(FP), DI
	MOVQ	dy+8(FP), SI
	MOVQ	x+16(FP), R8
	VBROADCASTSS	a+24(FP), Y15
	VBROADCASTSS	bx+28(FP), Y14
	VBROADCASTSS	mu+32(FP), Y13
	VBROADCASTSS	d+36(FP), Y12
	VBROADCASTSS	scale+40(FP), Y11
	VBROADCASTSS	shift+44(FP), Y10
	VXORPS	Y9, Y9, Y9
	MOVQ	n+48(FP), CX
	LOOPS(BNGRAD_RELU_8, BNGRAD_RELU_4, BNGRAD_RELU_1)

// GATE loads x (into X, kept) and g (into G) at AX and leaves in G the
// gradient where the relu of x·scale + shift lets it through, else +0;
// Z, Y, T and ZERO are scratch.
#define GATE(MOV, MUL, ADD, MAX, CMP, X, G, Z, Y, T, ZERO, SCALE, SHIFT) \
	MOV	(SI)(AX*4), X \
	MOV	(DI)(AX*4), G \
	MUL	SCALE, X, Z \
	ADD	SHIFT, Z, Z \
	VXORPS	ZERO, ZERO, ZERO \
	RELU_PASS(CMP, Z, ZERO, Y) \
	VANDPS	Y, G, G

// func gradSumsReLUVector(x, dy *float32, n int, mean float64, scale, shift float32) (float64, float64)
//
// gradSumsVector over the gated gradient (GATE), summed in the same
// order: the mean in Y15, scale in Y14, shift in Y13.
TEXT ·gradSumsReLUVector(SB), NOSPLIT, $0-56
	MOVQ	x+0(FP), SI
	MOVQ	dy+8(FP), DI
	MOVQ	n+16(FP), CX
	VBROADCASTSD	mean+24(FP), Y15
	VBROADCASTSS	scale+32(FP), Y14
	VBROADCASTSS	shift+36(FP), Y13
	VXORPD	Y8, Y8, Y8   // Σg, elements 0–3 of each eight
	VXORPD	Y9, Y9, Y9   // elements 4–7
	VXORPD	Y10, Y10, Y10 // Σg·(x − mean), elements 0–3
	VXORPD	Y11, Y11, Y11 // elements 4–7
	XORQ	AX, AX
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	rfour
reight:
	GATE(VMOVUPS, VMULPS, VADDPS, VMAXPS, VCMPPS, Y4, Y5, Y6, Y7, Y12, Y3, Y14, Y13)
	VCVTPS2PD	X5, Y0
	VEXTRACTF128	$1, Y5, X6
	VCVTPS2PD	X6, Y1
	VCVTPS2PD	X4, Y2
	VEXTRACTF128	$1, Y4, X6
	VCVTPS2PD	X6, Y3
	GRAD_SUMS_8
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	reight
rfour:
	MOVQ	CX, DX
	SUBQ	AX, DX
	CMPQ	DX, $4
	JLT	rone
	GATE(VMOVUPS, VMULPS, VADDPS, VMAXPS, VCMPPS, X4, X5, X6, X7, X12, X3, X14, X13)
	VCVTPS2PD	X5, Y0
	VCVTPS2PD	X4, Y2
	GRAD_SUMS_4
	ADDQ	$4, AX
rone:
	// The ninth sums, in X0 and X1.
	VXORPD	X0, X0, X0
	VXORPD	X1, X1, X1
rloop:
	CMPQ	AX, CX
	JGE	rdone
	GATE(VMOVSS, VMULSS, VADDSS, VMAXSS, VCMPSS, X4, X5, X6, X7, X12, X3, X14, X13)
	VCVTSS2SD	X5, X5, X5
	VCVTSS2SD	X4, X4, X4
	VSUBSD	X15, X4, X4
	VADDSD	X5, X0, X0
	VMULSD	X4, X5, X5
	VADDSD	X5, X1, X1
	INCQ	AX
	JMP	rloop
rdone:
	SUMS_COMBINE(Y8, Y9, X8, X0, X2)
	SUMS_COMBINE(Y10, Y11, X10, X1, X2)
	VMOVSD	X8, ret+40(FP)
	VMOVSD	X10, ret1+48(FP)
	VZEROUPPER
	RET

// y = reluOf(x).
#define RELU(MOV, MAX, CMP, Z, Y, T, ZERO) \
	MOV	(SI)(AX*4), Z \
	RELU_OF(MAX, CMP, Z, ZERO, Y, T) \
	MOV	Y, (DI)(AX*4)

#define RELU_8 RELU(VMOVUPS, VMAXPS, VCMPPS, Y0, Y1, Y2, Y13)
#define RELU_4 RELU(VMOVUPS, VMAXPS, VCMPPS, X0, X1, X2, X13)
#define RELU_1 RELU(VMOVSS, VMAXSS, VCMPSS, X0, X1, X2, X13)

// func reluVector(y, x *float32, n int)
TEXT ·reluVector(SB), NOSPLIT, $0-24
	MOVQ	y+0(FP), DI
	MOVQ	x+8(FP), SI
	VXORPS	Y13, Y13, Y13
	MOVQ	n+16(FP), CX
	LOOPS(RELU_8, RELU_4, RELU_1)

// dx = dy where y's bits, as a signed integer, are > 0; else +0. The
// comparison of a single element's XMM register compares its three zero
// lanes too, harmlessly.
#define RELU_BACK(MOV, Y, G, ZERO) \
	MOV	(R8)(AX*4), Y \
	VPCMPGTD	ZERO, Y, Y \
	MOV	(SI)(AX*4), G \
	VANDPS	Y, G, G \
	MOV	G, (DI)(AX*4)

#define RELU_BACK_8 RELU_BACK(VMOVUPS, Y0, Y1, Y13)
#define RELU_BACK_4 RELU_BACK(VMOVUPS, X0, X1, X13)
#define RELU_BACK_1 RELU_BACK(VMOVSS, X0, X1, X13)

// func reluBackwardVector(dx, dy, y *float32, n int)
TEXT ·reluBackwardVector(SB), NOSPLIT, $0-32
	MOVQ	dx+0(FP), DI
	MOVQ	dy+8(FP), SI
	MOVQ	y+16(FP), R8
	VXORPS	Y13, Y13, Y13
	MOVQ	n+24(FP), CX
	LOOPS(RELU_BACK_8, RELU_BACK_4, RELU_BACK_1)

// The 2×2 max pool (vecops.go's poolWinner) over windows j … j+7 (YMM) or
// j … j+3 (XMM), j in AX; r0 in SI, r1 in R8. POOL_SPLIT loads a row's
// 2·width values from the row at R and splits them into its windows'
// left (L) and right (R2) elements. For eight windows the split leaves
// them in the order 0 1 4 5 2 3 6 7 (VSHUFPS works within 128-bit lanes):
// VPERMPD $0xD8 (which is its own inverse) brings a row of eight outputs
// into that order and back.
#define POOL_SPLIT(OFF, ROW, T0, T1, L, R2) \
	VMOVUPS	(ROW)(AX*8), T0 \
	VMOVUPS	OFF(ROW)(AX*8), T1 \
	VSHUFPS	$0x88, T1, T0, L \
	VSHUFPS	$0xDD, T1, T0, R2

// POOL_TAKE sets M to the scan's choice of V over BEST (V > BEST, or V a
// NaN) and BEST to V where it does.
#define POOL_TAKE(V, BEST, M, T) \
	VCMPPS	$0x1e, BEST, V, M \
	VCMPPS	$3, V, V, T \
	VORPS	T, M, M \
	VBLENDVPS	M, V, BEST, BEST

// POOL_SCAN: the windows' a, b, c, d into A, B, C, D (T0 and T1 scratch),
// their maximum into A and the masks of b, c and d's choice into MB, MC,
// MD (T scratch).
#define POOL_SCAN(OFF, T0, T1, A, B, C, D, MB, MC, MD, T) \
	POOL_SPLIT(OFF, SI, T0, T1, A, B) \
	POOL_SPLIT(OFF, R8, T0, T1, C, D) \
	POOL_TAKE(B, A, MB, T) \
	POOL_TAKE(C, A, MC, T) \
	POOL_TAKE(D, A, MD, T)

// func maxPoolRowVector(y, r0, r1 *float32, n int)
TEXT ·maxPoolRowVector(SB), NOSPLIT, $0-32
	MOVQ	y+0(FP), DI
	MOVQ	r0+8(FP), SI
	MOVQ	r1+16(FP), R8
	MOVQ	n+24(FP), CX
	XORQ	AX, AX
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	pool4
pool8:
	POOL_SCAN(32, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9)
	VPERMPD	$0xD8, Y2, Y2
	VMOVUPS	Y2, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	pool8
pool4:
	CMPQ	AX, CX
	JGE	pooldone
	POOL_SCAN(16, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9)
	VMOVUPS	X2, (DI)(AX*4)
pooldone:
	VZEROUPPER
	RET

// POOL_BACK stores the gradient G (in the windows' order) at each
// window's maximum and +0 at its other three places: d0 at DI, d1 at R10.
#define POOL_BACK(OFF, G, MB, MC, MD, OA, OB, OC, OD, T, U) \
	VANDPS	MD, G, OD \
	VANDNPS	G, MD, T \
	VANDPS	MC, T, OC \
	VANDNPS	T, MC, T \
	VANDPS	MB, T, OB \
	VANDNPS	T, MB, OA \
	VUNPCKLPS	OB, OA, T \
	VUNPCKHPS	OB, OA, U \
	VMOVUPS	T, (DI)(AX*8) \
	VMOVUPS	U, OFF(DI)(AX*8) \
	VUNPCKLPS	OD, OC, T \
	VUNPCKHPS	OD, OC, U \
	VMOVUPS	T, (R10)(AX*8) \
	VMOVUPS	U, OFF(R10)(AX*8)

// func maxPoolBackwardRowVector(d0, d1, r0, r1, grad *float32, n int)
TEXT ·maxPoolBackwardRowVector(SB), NOSPLIT, $0-48
	MOVQ	d0+0(FP), DI
	MOVQ	d1+8(FP), R10
	MOVQ	r0+16(FP), SI
	MOVQ	r1+24(FP), R8
	MOVQ	grad+32(FP), R9
	MOVQ	n+40(FP), CX
	XORQ	AX, AX
	MOVQ	CX, DX
	ANDQ	$-8, DX
	JZ	back4
back8:
	POOL_SCAN(32, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9)
	VMOVUPS	(R9)(AX*4), Y9
	VPERMPD	$0xD8, Y9, Y9
	POOL_BACK(32, Y9, Y6, Y7, Y8, Y10, Y11, Y12, Y13, Y14, Y15)
	ADDQ	$8, AX
	CMPQ	AX, DX
	JLT	back8
back4:
	CMPQ	AX, CX
	JGE	backdone
	POOL_SCAN(16, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9)
	VMOVUPS	(R9)(AX*4), X9
	POOL_BACK(16, X9, X6, X7, X8, X10, X11, X12, X13, X14, X15)
backdone:
	VZEROUPPER
	RET

// SGD with momentum (vecops.go's sgdMomentum): p in DI, g in SI, buf in
// R8; lr, mom, damp1 and wd broadcast in Y15, Y14, Y13, Y12. SGD_DECAY
// adds wd·p to the gradient first.
#define SGD_STEP(MOV, MUL, ADD, SUB, W, D, B, LR, MOM, DAMP1) \
	MOV	(R8)(AX*4), B \
	MUL	MOM, B, B \
	MUL	DAMP1, D, D \
	ADD	D, B, B \
	MOV	B, (R8)(AX*4) \
	MUL	LR, B, B \
	SUB	B, W, W \
	MOV	W, (DI)(AX*4)

#define SGD(MOV, MUL, ADD, SUB, W, D, B, LR, MOM, DAMP1) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	SGD_STEP(MOV, MUL, ADD, SUB, W, D, B, LR, MOM, DAMP1)

#define SGD_DECAY(MOV, MUL, ADD, SUB, W, D, B, T, LR, MOM, DAMP1, WD) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	MUL	WD, W, T \
	ADD	T, D, D \
	SGD_STEP(MOV, MUL, ADD, SUB, W, D, B, LR, MOM, DAMP1)

#define SGD_8 SGD(VMOVUPS, VMULPS, VADDPS, VSUBPS, Y0, Y1, Y2, Y15, Y14, Y13)
#define SGD_4 SGD(VMOVUPS, VMULPS, VADDPS, VSUBPS, X0, X1, X2, X15, X14, X13)
#define SGD_1 SGD(VMOVSS, VMULSS, VADDSS, VSUBSS, X0, X1, X2, X15, X14, X13)
#define SGD_DECAY_8 SGD_DECAY(VMOVUPS, VMULPS, VADDPS, VSUBPS, Y0, Y1, Y2, Y3, Y15, Y14, Y13, Y12)
#define SGD_DECAY_4 SGD_DECAY(VMOVUPS, VMULPS, VADDPS, VSUBPS, X0, X1, X2, X3, X15, X14, X13, X12)
#define SGD_DECAY_1 SGD_DECAY(VMOVSS, VMULSS, VADDSS, VSUBSS, X0, X1, X2, X3, X15, X14, X13, X12)

// func sgdMomentumVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int)
// (wd unused: it is 0)
TEXT ·sgdMomentumVector(SB), NOSPLIT, $0-48
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	buf+16(FP), R8
	VBROADCASTSS	lr+24(FP), Y15
	VBROADCASTSS	mom+32(FP), Y14
	VBROADCASTSS	damp1+36(FP), Y13
	MOVQ	n+40(FP), CX
	LOOPS(SGD_8, SGD_4, SGD_1)

// func sgdMomentumDecayVector(p, grad, buf *float32, lr, wd, mom, damp1 float32, n int)
TEXT ·sgdMomentumDecayVector(SB), NOSPLIT, $0-48
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	buf+16(FP), R8
	VBROADCASTSS	lr+24(FP), Y15
	VBROADCASTSS	mom+32(FP), Y14
	VBROADCASTSS	damp1+36(FP), Y13
	MOVQ	n+40(FP), CX
	VBROADCASTSS	wd+28(FP), Y12
	LOOPS(SGD_DECAY_8, SGD_DECAY_4, SGD_DECAY_1)

// Adadelta (vecops.go's adadelta): p in DI, g in SI, sq in R8, acc in R9;
// lr, rho, 1 − rho, eps and wd broadcast in Y15 … Y11. Single elements
// run the packed instructions on XMM registers loaded with one element
// (the other lanes compute on zeros, harmlessly). ADADELTA_DECAY adds
// wd·p to the gradient first.
#define ADADELTA_STEP(MOV, W, D, S, A, T, U, LR, RHO, RHO1, EPS) \
	MOV	(R8)(AX*4), S \
	VMULPS	RHO, S, S \
	VMULPS	RHO1, D, T \
	VMULPS	D, T, T \
	VADDPS	T, S, S \
	MOV	S, (R8)(AX*4) \
	VADDPS	EPS, S, S \
	VSQRTPS	S, S \
	MOV	(R9)(AX*4), A \
	VADDPS	EPS, A, T \
	VSQRTPS	T, T \
	VDIVPS	S, T, T \
	VMULPS	D, T, T \
	VMULPS	RHO, A, A \
	VMULPS	RHO1, T, U \
	VMULPS	T, U, U \
	VADDPS	U, A, A \
	MOV	A, (R9)(AX*4) \
	VMULPS	LR, T, T \
	VSUBPS	T, W, W \
	MOV	W, (DI)(AX*4)

#define ADADELTA(MOV, W, D, S, A, T, U, LR, RHO, RHO1, EPS) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	ADADELTA_STEP(MOV, W, D, S, A, T, U, LR, RHO, RHO1, EPS)

#define ADADELTA_DECAY(MOV, W, D, S, A, T, U, LR, RHO, RHO1, EPS, WD) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	VMULPS	WD, W, T \
	VADDPS	T, D, D \
	ADADELTA_STEP(MOV, W, D, S, A, T, U, LR, RHO, RHO1, EPS)

#define ADADELTA_8 ADADELTA(VMOVUPS, Y0, Y1, Y2, Y3, Y4, Y5, Y15, Y14, Y13, Y12)
#define ADADELTA_4 ADADELTA(VMOVUPS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12)
#define ADADELTA_1 ADADELTA(VMOVSS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12)
#define ADADELTA_DECAY_8 ADADELTA_DECAY(VMOVUPS, Y0, Y1, Y2, Y3, Y4, Y5, Y15, Y14, Y13, Y12, Y11)
#define ADADELTA_DECAY_4 ADADELTA_DECAY(VMOVUPS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11)
#define ADADELTA_DECAY_1 ADADELTA_DECAY(VMOVSS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11)

// ONE_MINUS sets R to 1 − R (Y10 scratch).
#define ONE_MINUS(R) \
	MOVL	$0x3f800000, R10 \
	VMOVD	R10, X10 \
	VBROADCASTSS	X10, Y10 \
	VSUBPS	R, Y10, R

// func adadeltaVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int)
// (wd unused: it is 0)
TEXT ·adadeltaVector(SB), NOSPLIT, $0-56
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	sq+16(FP), R8
	MOVQ	acc+24(FP), R9
	VBROADCASTSS	lr+32(FP), Y15
	VBROADCASTSS	rho+36(FP), Y14
	VBROADCASTSS	rho+36(FP), Y13
	ONE_MINUS(Y13)
	VBROADCASTSS	eps+40(FP), Y12
	MOVQ	n+48(FP), CX
	LOOPS(ADADELTA_8, ADADELTA_4, ADADELTA_1)

// func adadeltaDecayVector(p, grad, sq, acc *float32, lr, rho, eps, wd float32, n int)
TEXT ·adadeltaDecayVector(SB), NOSPLIT, $0-56
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	sq+16(FP), R8
	MOVQ	acc+24(FP), R9
	VBROADCASTSS	lr+32(FP), Y15
	VBROADCASTSS	rho+36(FP), Y14
	VBROADCASTSS	rho+36(FP), Y13
	ONE_MINUS(Y13)
	VBROADCASTSS	eps+40(FP), Y12
	VBROADCASTSS	wd+44(FP), Y11
	MOVQ	n+48(FP), CX
	LOOPS(ADADELTA_DECAY_8, ADADELTA_DECAY_4, ADADELTA_DECAY_1)

// The AVX2 dropout's lanes' offsets from a group of eight's first index,
// plus one: Y4 hashes the group's even elements, Y5 its odd ones, so that
// the hashes, narrowed by shifting Y5's into the high halves of Y4's
// quadwords, lie in the elements' order.
DATA dropoutPairs<>+0(SB)/8, $1
DATA dropoutPairs<>+8(SB)/8, $3
DATA dropoutPairs<>+16(SB)/8, $5
DATA dropoutPairs<>+24(SB)/8, $7
DATA dropoutPairs<>+32(SB)/8, $2
DATA dropoutPairs<>+40(SB)/8, $4
DATA dropoutPairs<>+48(SB)/8, $6
DATA dropoutPairs<>+56(SB)/8, $8
GLOBL dropoutPairs<>(SB), RODATA|NOPTR, $64

// DROPOUT_APPLY turns eight hashes (24-bit integers in Y0's lanes) into
// the mask and output of elements AX … AX+7: u = hash·SCALE (2⁻²⁴) is
// uniform in [0, 1); the mask is keep (Y14) where !(u < p) (p in Y15),
// else +0; y = x (R8) · mask; the mask goes to SI and y to DI. Y1 and Y2
// are scratch.
#define DROPOUT_APPLY(SCALE) \
	VCVTDQ2PS	Y0, Y0 \
	VMULPS	SCALE, Y0, Y0 \
	VCMPPS	$5, Y15, Y0, Y1 \
	VANDPS	Y14, Y1, Y1 \
	VMOVUPS	Y1, (SI)(AX*4) \
	VMOVUPS	(R8)(AX*4), Y2 \
	VMULPS	Y1, Y2, Y2 \
	VMOVUPS	Y2, (DI)(AX*4)

// X = X·C modulo 2⁶⁴ in each quadword lane, AVX2 having no 64-bit
// multiply: lo(X)·lo(C) + (hi(X)·lo(C) + lo(X)·hi(C))·2³², CL holding C
// (VPMULUDQ reads the low half of each lane) and CH C >> 32.
#define MUL64(X, CL, CH, T1, T2) \
	VPSRLQ	$32, X, T1 \
	VPMULUDQ	CL, T1, T1 \
	VPMULUDQ	CH, X, T2 \
	VPADDQ	T2, T1, T1 \
	VPSLLQ	$32, T1, T1 \
	VPMULUDQ	CL, X, X \
	VPADDQ	T1, X, X

// X = bits 40 to 63 of uniform's hash of X (seed + (i + 1)·golden
// already added): splitmix64's last step, z ^= z >> 31, leaves those
// bits as they are, so it is left out.
#define DROPOUT_HASH(X, T1, T2) \
	VPSRLQ	$30, X, T1 \
	VPXOR	T1, X, X \
	MUL64(X, Y11, Y10, T1, T2) \
	VPSRLQ	$27, X, T1 \
	VPXOR	T1, X, X \
	MUL64(X, Y9, Y8, T1, T2) \
	VPSRLQ	$40, X, X

// func dropoutVector(y, mask, x *float32, p, keep float32, seed, off uint64, n int)
// dropoutWide in AVX2: eight elements at a time, their hashes' inputs in
// Y4 (even elements) and Y5 (odd ones), each lane advanced by 8·golden a
// group.
TEXT ·dropoutVector(SB), NOSPLIT, $0-56
	MOVQ	y+0(FP), DI
	MOVQ	mask+8(FP), SI
	MOVQ	x+16(FP), R8
	VBROADCASTSS	p+24(FP), Y15
	VBROADCASTSS	keep+28(FP), Y14
	MOVL	$0x33800000, AX // 2⁻²⁴
	MOVQ	AX, X0
	VPBROADCASTD	X0, Y13
	MOVQ	$0x9e3779b97f4a7c15, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y7
	SHRQ	$32, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y6
	MOVQ	$0x9e3779b97f4a7c15, AX
	SHLQ	$3, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y12
	MOVQ	$0xbf58476d1ce4e5b9, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y11
	SHRQ	$32, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y10
	MOVQ	$0x94d049bb133111eb, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y9
	SHRQ	$32, AX
	MOVQ	AX, X0
	VPBROADCASTQ	X0, Y8
	VPBROADCASTQ	off+40(FP), Y4
	VMOVDQA	Y4, Y5
	VPADDQ	dropoutPairs<>+0(SB), Y4, Y4
	VPADDQ	dropoutPairs<>+32(SB), Y5, Y5
	MUL64(Y4, Y7, Y6, Y0, Y1)
	MUL64(Y5, Y7, Y6, Y0, Y1)
	VPBROADCASTQ	seed+32(FP), Y0
	VPADDQ	Y0, Y4, Y4
	VPADDQ	Y0, Y5, Y5
	MOVQ	n+48(FP), CX
	XORQ	AX, AX
dropoutAVX2:
	VMOVDQA	Y4, Y0
	VMOVDQA	Y5, Y1
	DROPOUT_HASH(Y0, Y2, Y3)
	DROPOUT_HASH(Y1, Y2, Y3)
	VPSLLQ	$32, Y1, Y1
	VPOR	Y1, Y0, Y0
	DROPOUT_APPLY(Y13)
	VPADDQ	Y12, Y4, Y4
	VPADDQ	Y12, Y5, Y5
	ADDQ	$8, AX
	CMPQ	AX, CX
	JLT	dropoutAVX2
	VZEROUPPER
	RET

// The lanes' offsets from a group of eight's first index, plus one
// (uniform hashes index i as i + 1).
DATA dropoutLanes<>+0(SB)/8, $1
DATA dropoutLanes<>+8(SB)/8, $2
DATA dropoutLanes<>+16(SB)/8, $3
DATA dropoutLanes<>+24(SB)/8, $4
DATA dropoutLanes<>+32(SB)/8, $5
DATA dropoutLanes<>+40(SB)/8, $6
DATA dropoutLanes<>+48(SB)/8, $7
DATA dropoutLanes<>+56(SB)/8, $8
GLOBL dropoutLanes<>(SB), RODATA|NOPTR, $64

// func dropoutWide(y, mask, x *float32, p, keep float32, seed, off uint64, n int)
// Eight elements at a time: backend.go's uniform (splitmix64 of seed +
// (i + 1)·golden) in 64-bit lanes of Z12, the top 24 bits of each hash
// narrowed to 32-bit lanes and scaled by 2⁻²⁴ (exact), compared with p:
// f = keep where !(u < p), else 0.
TEXT ·dropoutWide(SB), NOSPLIT, $0-56
	MOVQ	y+0(FP), DI
	MOVQ	mask+8(FP), SI
	MOVQ	x+16(FP), R8
	VBROADCASTSS	p+24(FP), Y15
	VBROADCASTSS	keep+28(FP), Y14
	VPBROADCASTQ	seed+32(FP), Z13
	VPBROADCASTQ	off+40(FP), Z12
	VPADDQ	dropoutLanes<>(SB), Z12, Z12
	MOVQ	$0x9e3779b97f4a7c15, AX
	VPBROADCASTQ	AX, Z11
	MOVQ	$0xbf58476d1ce4e5b9, AX
	VPBROADCASTQ	AX, Z10
	MOVQ	$0x94d049bb133111eb, AX
	VPBROADCASTQ	AX, Z9
	MOVQ	$8, AX
	VPBROADCASTQ	AX, Z8
	MOVL	$0x33800000, AX // 2⁻²⁴
	VMOVD	AX, X7
	VBROADCASTSS	X7, Y7
	MOVQ	n+48(FP), CX
	XORQ	AX, AX
dropout8:
	VPMULLQ	Z11, Z12, Z0
	VPADDQ	Z13, Z0, Z0
	VPSRLQ	$30, Z0, Z1
	VPXORQ	Z1, Z0, Z0
	VPMULLQ	Z10, Z0, Z0
	VPSRLQ	$27, Z0, Z1
	VPXORQ	Z1, Z0, Z0
	VPMULLQ	Z9, Z0, Z0
	VPSRLQ	$31, Z0, Z1
	VPXORQ	Z1, Z0, Z0
	VPSRLQ	$40, Z0, Z0
	VPMOVQD	Z0, Y0
	DROPOUT_APPLY(Y7)
	VPADDQ	Z8, Z12, Z12
	ADDQ	$8, AX
	CMPQ	AX, CX
	JLT	dropout8
	VZEROUPPER
	RET

// Adam (vecops.go's adam): p in DI, g in SI, m in R8, v in R9; step,
// bc2, eps, 1 − β1, β2, 1 − β2 and wd broadcast in Y15 … Y9. Single
// elements run the packed instructions on XMM registers, as Adadelta's.
#define ADAM_STEP(MOV, W, D, M, V, T, U, STEP, BC2, EPS, B1C, B2, B2C) \
	MOV	(R8)(AX*4), M \
	VSUBPS	M, D, T \
	VMULPS	B1C, T, T \
	VADDPS	T, M, M \
	MOV	M, (R8)(AX*4) \
	MOV	(R9)(AX*4), V \
	VMULPS	B2, V, V \
	VMULPS	B2C, D, U \
	VMULPS	D, U, U \
	VADDPS	U, V, V \
	MOV	V, (R9)(AX*4) \
	VSQRTPS	V, V \
	VDIVPS	BC2, V, V \
	VADDPS	EPS, V, V \
	VMULPS	STEP, M, T \
	VDIVPS	V, T, T \
	VSUBPS	T, W, W \
	MOV	W, (DI)(AX*4)

#define ADAM(MOV, W, D, M, V, T, U, STEP, BC2, EPS, B1C, B2, B2C) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	ADAM_STEP(MOV, W, D, M, V, T, U, STEP, BC2, EPS, B1C, B2, B2C)

#define ADAM_DECAY(MOV, W, D, M, V, T, U, STEP, BC2, EPS, B1C, B2, B2C, WD) \
	MOV	(DI)(AX*4), W \
	MOV	(SI)(AX*4), D \
	VMULPS	WD, W, T \
	VADDPS	T, D, D \
	ADAM_STEP(MOV, W, D, M, V, T, U, STEP, BC2, EPS, B1C, B2, B2C)

#define ADAM_8 ADAM(VMOVUPS, Y0, Y1, Y2, Y3, Y4, Y5, Y15, Y14, Y13, Y12, Y11, Y10)
#define ADAM_4 ADAM(VMOVUPS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11, X10)
#define ADAM_1 ADAM(VMOVSS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11, X10)
#define ADAM_DECAY_8 ADAM_DECAY(VMOVUPS, Y0, Y1, Y2, Y3, Y4, Y5, Y15, Y14, Y13, Y12, Y11, Y10, Y9)
#define ADAM_DECAY_4 ADAM_DECAY(VMOVUPS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11, X10, X9)
#define ADAM_DECAY_1 ADAM_DECAY(VMOVSS, X0, X1, X2, X3, X4, X5, X15, X14, X13, X12, X11, X10, X9)

// func adamVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int)
// (wd unused: it is 0)
TEXT ·adamVector(SB), NOSPLIT, $0-72
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	m+16(FP), R8
	MOVQ	v+24(FP), R9
	VBROADCASTSS	step+32(FP), Y15
	VBROADCASTSS	bc2+36(FP), Y14
	VBROADCASTSS	eps+40(FP), Y13
	VBROADCASTSS	b1c+44(FP), Y12
	VBROADCASTSS	b2+48(FP), Y11
	VBROADCASTSS	b2c+52(FP), Y10
	MOVQ	n+64(FP), CX
	LOOPS(ADAM_8, ADAM_4, ADAM_1)

// func adamDecayVector(p, grad, m, v *float32, step, bc2, eps, b1c, b2, b2c, wd float32, n int)
TEXT ·adamDecayVector(SB), NOSPLIT, $0-72
	MOVQ	p+0(FP), DI
	MOVQ	grad+8(FP), SI
	MOVQ	m+16(FP), R8
	MOVQ	v+24(FP), R9
	VBROADCASTSS	step+32(FP), Y15
	VBROADCASTSS	bc2+36(FP), Y14
	VBROADCASTSS	eps+40(FP), Y13
	VBROADCASTSS	b1c+44(FP), Y12
	VBROADCASTSS	b2+48(FP), Y11
	VBROADCASTSS	b2c+52(FP), Y10
	VBROADCASTSS	wd+56(FP), Y9
	MOVQ	n+64(FP), CX
	LOOPS(ADAM_DECAY_8, ADAM_DECAY_4, ADAM_DECAY_1)

// func gather2Vector(dst, src *float32, n int)
//
// gather2 (vecops.go) for n a multiple of 8, reading src[0:2n]: sixteen
// values at a time, their even ones split out by VSHUFPS in the order
// 0 1 4 5 2 3 6 7 and put back in order by VPERMPD $0xD8 (POOL_SPLIT's
// step).
TEXT ·gather2Vector(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	XORQ	AX, AX
gather8:
	VMOVUPS	(SI)(AX*8), Y0
	VMOVUPS	32(SI)(AX*8), Y1
	VSHUFPS	$0x88, Y1, Y0, Y2
	VPERMPD	$0xD8, Y2, Y2
	VMOVUPS	Y2, (DI)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JLT	gather8
	VZEROUPPER
	RET

// func rowPicks3Vector(v *float32, at *int32, row *float32, first, n int)
//
// Windows of three at stride two: window t holds row[2t], row[2t+1] and
// row[2t+2]; v[t] gets the scan's pick and at[t] its column, first + 2t
// + 0, 1 or 2. Eight windows at a time (n a multiple of 8), reading
// row[0 … 2n+1].
TEXT ·rowPicks3Vector(SB), NOSPLIT, $0-40
	MOVQ	v+0(FP), DI
	MOVQ	at+8(FP), R9
	MOVQ	row+16(FP), SI
	LEAQ	8(SI), R8
	MOVQ	first+24(FP), BX
	MOVQ	n+32(FP), CX
	// Y12: each lane's first column, in POOL_SPLIT's window order
	// 0 1 4 5 2 3 6 7; Y13, Y14, Y15: 1, 2 and 16 in every lane.
	VMOVQ	BX, X12
	VPBROADCASTD	X12, Y12
	VPADDD	pickLanes<>(SB), Y12, Y12
	MOVL	$1, BX
	VMOVQ	BX, X13
	VPBROADCASTD	X13, Y13
	VPADDD	Y13, Y13, Y14
	MOVL	$16, BX
	VMOVQ	BX, X15
	VPBROADCASTD	X15, Y15
	XORQ	AX, AX
picks8:
	POOL_SPLIT(32, SI, Y0, Y1, Y2, Y3)
	POOL_SPLIT(32, R8, Y0, Y1, Y4, Y5)
	VMOVDQU	Y12, Y6
	POOL_TAKE(Y3, Y2, Y7, Y8)
	VPADDD	Y13, Y12, Y9
	VBLENDVPS	Y7, Y9, Y6, Y6
	POOL_TAKE(Y4, Y2, Y7, Y8)
	VPADDD	Y14, Y12, Y9
	VBLENDVPS	Y7, Y9, Y6, Y6
	VPERMPD	$0xD8, Y2, Y2
	VPERMPD	$0xD8, Y6, Y6
	VMOVUPS	Y2, (DI)(AX*4)
	VMOVDQU	Y6, (R9)(AX*4)
	VPADDD	Y15, Y12, Y12
	ADDQ	$8, AX
	CMPQ	AX, CX
	JLT	picks8
	VZEROUPPER
	RET

// func pickRowsVector(best *float32, at *int32, v *float32, cols *int32, base, n int)
//
// Continues n scans with the picks of a further row: where the scan takes
// v[j] over best[j], best[j] = v[j] and at[j] = base + cols[j]. n a
// multiple of 8.
TEXT ·pickRowsVector(SB), NOSPLIT, $0-48
	MOVQ	best+0(FP), DI
	MOVQ	at+8(FP), R9
	MOVQ	v+16(FP), SI
	MOVQ	cols+24(FP), R8
	MOVQ	base+32(FP), BX
	MOVQ	n+40(FP), CX
	VMOVQ	BX, X5
	VPBROADCASTD	X5, Y5
	XORQ	AX, AX
rows8:
	VMOVUPS	(SI)(AX*4), Y0
	VMOVUPS	(DI)(AX*4), Y1
	POOL_TAKE(Y0, Y1, Y2, Y3)
	VMOVUPS	Y1, (DI)(AX*4)
	VPADDD	(R8)(AX*4), Y5, Y4
	VMOVDQU	(R9)(AX*4), Y6
	VBLENDVPS	Y2, Y4, Y6, Y6
	VMOVDQU	Y6, (R9)(AX*4)
	ADDQ	$8, AX
	CMPQ	AX, CX
	JLT	rows8
	VZEROUPPER
	RET

DATA pickLanes<>+0(SB)/4, $0
DATA pickLanes<>+4(SB)/4, $2
DATA pickLanes<>+8(SB)/4, $8
DATA pickLanes<>+12(SB)/4, $10
DATA pickLanes<>+16(SB)/4, $4
DATA pickLanes<>+20(SB)/4, $6
DATA pickLanes<>+24(SB)/4, $12
DATA pickLanes<>+28(SB)/4, $14
GLOBL pickLanes<>(SB), RODATA|NOPTR, $32

// STRIDED runs BODY8, BODY4 and BODY1 over AX from 0 to CX, as ROWS does
// over one row, with DX free for a pointer: CX is moved down by eight and
// four so that it is the bound to compare with.
#define STRIDED(BODY8, BODY4, BODY1) \
	XORQ	AX, AX \
	SUBQ	$8, CX \
eight: \
	CMPQ	AX, CX \
	JGT	four \
	BODY8 \
	ADDQ	$8, AX \
	JMP	eight \
four: \
	ADDQ	$4, CX \
	CMPQ	AX, CX \
	JGT	one \
	BODY4 \
	ADDQ	$4, AX \
one: \
	ADDQ	$4, CX \
ones: \
	CMPQ	AX, CX \
	JGE	done \
	BODY1 \
	INCQ	AX \
	JMP	ones \
done: \
	VZEROUPPER \
	RET

// SIXROWS sets R8 … R13 to the six rows from x, xs elements apart, and
// the first of the outputs to DI, ys elements apart in SI (bytes).
#define SIXROWS \
	MOVQ	y+0(FP), DI \
	MOVQ	ys+8(FP), SI \
	SHLQ	$2, SI \
	MOVQ	x+16(FP), R8 \
	MOVQ	xs+24(FP), DX \
	SHLQ	$2, DX \
	LEAQ	(R8)(DX*1), R9 \
	LEAQ	(R9)(DX*1), R10 \
	LEAQ	(R10)(DX*1), R11 \
	LEAQ	(R11)(DX*1), R12 \
	LEAQ	(R12)(DX*1), R13 \
	MOVQ	n+32(FP), CX

// LOAD6 loads element AX of the six rows at R8 … R13 into A … F.
#define LOAD6(MOV, A, B, C, D, E, F) \
	MOV	(R8)(AX*4), A \
	MOV	(R9)(AX*4), B \
	MOV	(R10)(AX*4), C \
	MOV	(R11)(AX*4), D \
	MOV	(R12)(AX*4), E \
	MOV	(R13)(AX*4), F

// BROADCAST sets Y to the float32 of bits BITS in every lane.
#define BROADCAST(BITS, X, Y) \
	MOVL	BITS, AX \
	VMOVD	AX, X \
	VBROADCASTSS	X, Y

// bt6 (vecops.go): loads x0 … x5 into A … F; G, H, I, J are scratch;
// Y13 holds 4, Y14 5, Y15 2 (X13 … X15 their low lanes). Outputs y0 …
// y5 at DI, BX, DX, R14, R15, SI.
#define BT6(MOV, MUL, SUB, ADD, A, B, C, D, E, F, G, H, I, J, K4, K5, K2) \
	LOAD6(MOV, A, B, C, D, E, F) \
	MUL	K4, C, G \
	SUB	G, E, G \
	MUL	K4, B, H \
	SUB	H, D, H \
	ADD	H, G, I \
	SUB	H, G, J \
	MOV	I, (BX)(AX*4) \
	MOV	J, (DX)(AX*4) \
	SUB	C, E, G \
	SUB	B, D, H \
	MUL	K2, H, H \
	ADD	H, G, I \
	SUB	H, G, J \
	MOV	I, (R14)(AX*4) \
	MOV	J, (R15)(AX*4) \
	MUL	K4, A, G \
	MUL	K5, C, H \
	SUB	H, G, G \
	ADD	E, G, G \
	MOV	G, (DI)(AX*4) \
	MUL	K4, B, G \
	MUL	K5, D, H \
	SUB	H, G, G \
	ADD	F, G, G \
	MOV	G, (SI)(AX*4)

#define BT6_8 BT6(VMOVUPS, VMULPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y13, Y14, Y15)
#define BT6_4 BT6(VMOVUPS, VMULPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X13, X14, X15)
#define BT6_1 BT6(VMOVSS, VMULSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X13, X14, X15)

// func bt6Vector(y *float32, ys int, x *float32, xs, n int)
TEXT ·bt6Vector(SB), NOSPLIT, $0-40
	BROADCAST($0x40800000, X13, Y13)
	BROADCAST($0x40a00000, X14, Y14)
	BROADCAST($0x40000000, X15, Y15)
	SIXROWS
	// The outputs: y0 at DI, y1 … y5 at BX, DX, R14, R15, SI.
	LEAQ	(DI)(SI*1), BX
	LEAQ	(BX)(SI*1), DX
	LEAQ	(DX)(SI*1), R14
	LEAQ	(R14)(SI*1), R15
	LEAQ	(R15)(SI*1), SI
	STRIDED(BT6_8, BT6_4, BT6_1)

// at4 (vecops.go): loads x0 … x5 into A … F; G … J are scratch; Y13
// holds 2, Y14 4, Y15 8. Outputs y0 … y3 at DI, BX, DX, R14.
#define AT4(MOV, MUL, SUB, ADD, A, B, C, D, E, F, G, H, I, J, K2, K4, K8) \
	LOAD6(MOV, A, B, C, D, E, F) \
	ADD	C, B, G \
	SUB	C, B, H \
	ADD	E, D, I \
	SUB	E, D, J \
	ADD	G, A, A \
	ADD	I, A, A \
	MOV	A, (DI)(AX*4) \
	MUL	K2, J, B \
	ADD	B, H, B \
	MOV	B, (BX)(AX*4) \
	MUL	K4, I, C \
	ADD	C, G, C \
	MOV	C, (DX)(AX*4) \
	MUL	K8, J, D \
	ADD	D, H, D \
	ADD	F, D, D \
	MOV	D, (R14)(AX*4)

#define AT4_8 AT4(VMOVUPS, VMULPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y13, Y14, Y15)
#define AT4_4 AT4(VMOVUPS, VMULPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X13, X14, X15)
#define AT4_1 AT4(VMOVSS, VMULSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X13, X14, X15)

// func at4Vector(y *float32, ys int, x *float32, xs, n int)
TEXT ·at4Vector(SB), NOSPLIT, $0-40
	BROADCAST($0x40000000, X13, Y13)
	BROADCAST($0x40800000, X14, Y14)
	BROADCAST($0x41000000, X15, Y15)
	SIXROWS
	LEAQ	(DI)(SI*1), BX
	LEAQ	(BX)(SI*1), DX
	LEAQ	(DX)(SI*1), R14
	STRIDED(AT4_8, AT4_4, AT4_1)

// g6 (vecops.go): loads x0, x1, x2 into A, B, C; D … H are scratch; Y12
// holds 1/4, Y13 1/2, Y14 1/6, Y15 −1/6. Outputs y0 … y5 at DI, BX, DX,
// R14, R15, SI; x0 … x2 at R8 … R10.
#define G6(MOV, MUL, SUB, ADD, A, B, C, D, E, F, G, H, K4, K2, K6, KN6) \
	MOV	(R8)(AX*4), A \
	MOV	(R9)(AX*4), B \
	MOV	(R10)(AX*4), C \
	MUL	K4, A, D \
	MOV	D, (DI)(AX*4) \
	ADD	C, D, D \
	MUL	K2, B, E \
	ADD	C, A, F \
	ADD	B, F, G \
	MUL	KN6, G, G \
	MOV	G, (BX)(AX*4) \
	SUB	B, F, H \
	MUL	KN6, H, H \
	MOV	H, (DX)(AX*4) \
	ADD	E, D, G \
	MUL	K6, G, G \
	MOV	G, (R14)(AX*4) \
	SUB	E, D, H \
	MUL	K6, H, H \
	MOV	H, (R15)(AX*4) \
	MOV	C, (SI)(AX*4)

#define G6_8 G6(VMOVUPS, VMULPS, VSUBPS, VADDPS, Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y12, Y13, Y14, Y15)
#define G6_4 G6(VMOVUPS, VMULPS, VSUBPS, VADDPS, X0, X1, X2, X3, X4, X5, X6, X7, X12, X13, X14, X15)
#define G6_1 G6(VMOVSS, VMULSS, VSUBSS, VADDSS, X0, X1, X2, X3, X4, X5, X6, X7, X12, X13, X14, X15)

// func g6Vector(y *float32, ys int, x *float32, xs, n int)
TEXT ·g6Vector(SB), NOSPLIT, $0-40
	BROADCAST($0x3e800000, X12, Y12)
	BROADCAST($0x3f000000, X13, Y13)
	BROADCAST($0x3e2aaaab, X14, Y14)
	BROADCAST($0xbe2aaaab, X15, Y15)
	SIXROWS
	LEAQ	(DI)(SI*1), BX
	LEAQ	(BX)(SI*1), DX
	LEAQ	(DX)(SI*1), R14
	LEAQ	(R14)(SI*1), R15
	LEAQ	(R15)(SI*1), SI
	STRIDED(G6_8, G6_4, G6_1)

// TRANSPOSE8 transposes the 8×8 block in Y0 … Y7 (rows) into Y8 … Y15
// (columns), through unpacks, shuffles and lane permutes; moves only.
#define TRANSPOSE8 \
	VUNPCKLPS	Y1, Y0, Y8 \
	VUNPCKHPS	Y1, Y0, Y9 \
	VUNPCKLPS	Y3, Y2, Y10 \
	VUNPCKHPS	Y3, Y2, Y11 \
	VUNPCKLPS	Y5, Y4, Y12 \
	VUNPCKHPS	Y5, Y4, Y13 \
	VUNPCKLPS	Y7, Y6, Y14 \
	VUNPCKHPS	Y7, Y6, Y15 \
	VSHUFPS	$0x44, Y10, Y8, Y0 \
	VSHUFPS	$0xEE, Y10, Y8, Y1 \
	VSHUFPS	$0x44, Y11, Y9, Y2 \
	VSHUFPS	$0xEE, Y11, Y9, Y3 \
	VSHUFPS	$0x44, Y14, Y12, Y4 \
	VSHUFPS	$0xEE, Y14, Y12, Y5 \
	VSHUFPS	$0x44, Y15, Y13, Y6 \
	VSHUFPS	$0xEE, Y15, Y13, Y7 \
	VPERM2F128	$0x20, Y4, Y0, Y8 \
	VPERM2F128	$0x20, Y5, Y1, Y9 \
	VPERM2F128	$0x20, Y6, Y2, Y10 \
	VPERM2F128	$0x20, Y7, Y3, Y11 \
	VPERM2F128	$0x31, Y4, Y0, Y12 \
	VPERM2F128	$0x31, Y5, Y1, Y13 \
	VPERM2F128	$0x31, Y6, Y2, Y14 \
	VPERM2F128	$0x31, Y7, Y3, Y15

// transposeBlocks' registers: src in SI with rows R8 bytes apart (R13 =
// 3·R8, R14 = SI + 4·R8), dst in DI with rows R9 bytes apart (BX = 3·R9,
// R15 = DI + 4·R9), the blocks' steps in R10 and R11 (bytes), the count
// in CX; TRANSPOSESTRIDES sets R13 and BX.
#define TRANSPOSESTRIDES \
	SHLQ	$2, R9 \
	SHLQ	$2, R11 \
	SHLQ	$2, R8 \
	SHLQ	$2, R10 \
	LEAQ	(R8)(R8*2), R13 \
	LEAQ	(R9)(R9*2), BX

#define LOADBLOCK \
	LEAQ	(SI)(R8*4), R14 \
	VMOVUPS	(SI), Y0 \
	VMOVUPS	(SI)(R8*1), Y1 \
	VMOVUPS	(SI)(R8*2), Y2 \
	VMOVUPS	(SI)(R13*1), Y3 \
	VMOVUPS	(R14), Y4 \
	VMOVUPS	(R14)(R8*1), Y5 \
	VMOVUPS	(R14)(R8*2), Y6 \
	VMOVUPS	(R14)(R13*1), Y7

#define STOREBLOCK \
	LEAQ	(DI)(R9*4), R15 \
	VMOVUPS	Y8, (DI) \
	VMOVUPS	Y9, (DI)(R9*1) \
	VMOVUPS	Y10, (DI)(R9*2) \
	VMOVUPS	Y11, (DI)(BX*1) \
	VMOVUPS	Y12, (R15) \
	VMOVUPS	Y13, (R15)(R9*1) \
	VMOVUPS	Y14, (R15)(R9*2) \
	VMOVUPS	Y15, (R15)(BX*1) \
	ADDQ	R10, SI \
	ADDQ	R11, DI

// func transposeBlocksVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int)
TEXT ·transposeBlocksVector(SB), NOSPLIT, $0-56
	MOVQ	dst+0(FP), DI
	MOVQ	dstRow+8(FP), R9
	MOVQ	dstStep+16(FP), R11
	MOVQ	src+24(FP), SI
	MOVQ	srcRow+32(FP), R8
	MOVQ	srcStep+40(FP), R10
	MOVQ	blocks+48(FP), CX
	TRANSPOSESTRIDES
tblock:
	LOADBLOCK
	TRANSPOSE8
	STOREBLOCK
	DECQ	CX
	JNZ	tblock
	VZEROUPPER
	RET

// func transposeBlocksBiasVector(dst *float32, dstRow, dstStep int, src *float32, srcRow, srcStep, blocks int, bias *float32)
TEXT ·transposeBlocksBiasVector(SB), NOSPLIT, $0-64
	MOVQ	dst+0(FP), DI
	MOVQ	dstRow+8(FP), R9
	MOVQ	dstStep+16(FP), R11
	MOVQ	src+24(FP), SI
	MOVQ	srcRow+32(FP), R8
	MOVQ	srcStep+40(FP), R10
	MOVQ	blocks+48(FP), CX
	TRANSPOSESTRIDES
	MOVQ	bias+56(FP), DX
bblock:
	LOADBLOCK
	TRANSPOSE8
	VBROADCASTSS	(DX), Y0
	VADDPS	Y0, Y8, Y8
	VBROADCASTSS	4(DX), Y1
	VADDPS	Y1, Y9, Y9
	VBROADCASTSS	8(DX), Y2
	VADDPS	Y2, Y10, Y10
	VBROADCASTSS	12(DX), Y3
	VADDPS	Y3, Y11, Y11
	VBROADCASTSS	16(DX), Y4
	VADDPS	Y4, Y12, Y12
	VBROADCASTSS	20(DX), Y5
	VADDPS	Y5, Y13, Y13
	VBROADCASTSS	24(DX), Y6
	VADDPS	Y6, Y14, Y14
	VBROADCASTSS	28(DX), Y7
	VADDPS	Y7, Y15, Y15
	STOREBLOCK
	DECQ	CX
	JNZ	bblock
	VZEROUPPER
	RET
