//go:build amd64 && !purego

#include "textflag.h"

// The Winograd row kernels (vecops.go): each runs its operation over n ≥ 1
// elements with AVX2, eight at a time (YMM), then four (XMM), then one,
// index in AX; the kernels over rows do so for each of rows ≥ 1 rows (BX
// counts them down), moving their pointers by the strides, in bytes, of
// R11 and R12. Each computes exactly what the Go loop in vecops.go
// computes, in the same order, so the results are the same bits.

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
