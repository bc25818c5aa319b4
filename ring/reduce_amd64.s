//go:build amd64 && !purego

#include "textflag.h"

// Element-wise dst[i] = a[i] OP b[i] for i < n with AVX2, where n is a
// positive multiple of one vector (8 float32 or 4 float64); SHIFT turns
// elements into bytes. Four vectors
// per iteration while at least four remain, then one at a time. Every
// vector is loaded from a and b before it is stored, so dst may be a or b.
// The first source of each operation is a, as in the scalar loop, so the
// results (NaN payloads included) are the same bits.
#define KERNEL(NAME, LOADOP, OP, SHIFT) \
TEXT NAME(SB), NOSPLIT, $0-32 \
	MOVQ	dst+0(FP), DI \
	MOVQ	a+8(FP), SI \
	MOVQ	b+16(FP), DX \
	MOVQ	n+24(FP), CX \
	SHLQ	$SHIFT, CX \
	XORQ	AX, AX \
	MOVQ	CX, BX \
	ANDQ	$-128, BX \
	JZ	one \
big: \
	LOADOP	0(SI)(AX*1), Y0 \
	LOADOP	32(SI)(AX*1), Y1 \
	LOADOP	64(SI)(AX*1), Y2 \
	LOADOP	96(SI)(AX*1), Y3 \
	OP	0(DX)(AX*1), Y0, Y0 \
	OP	32(DX)(AX*1), Y1, Y1 \
	OP	64(DX)(AX*1), Y2, Y2 \
	OP	96(DX)(AX*1), Y3, Y3 \
	LOADOP	Y0, 0(DI)(AX*1) \
	LOADOP	Y1, 32(DI)(AX*1) \
	LOADOP	Y2, 64(DI)(AX*1) \
	LOADOP	Y3, 96(DI)(AX*1) \
	ADDQ	$128, AX \
	CMPQ	AX, BX \
	JB	big \
one: \
	CMPQ	AX, CX \
	JAE	done \
	LOADOP	0(SI)(AX*1), Y0 \
	OP	0(DX)(AX*1), Y0, Y0 \
	LOADOP	Y0, 0(DI)(AX*1) \
	ADDQ	$32, AX \
	JMP	one \
done: \
	VZEROUPPER \
	RET

// func addF32(dst, a, b *float32, n int)
KERNEL(·addF32, VMOVUPS, VADDPS, 2)

// func mulF32(dst, a, b *float32, n int)
KERNEL(·mulF32, VMOVUPS, VMULPS, 2)

// func addF64(dst, a, b *float64, n int)
KERNEL(·addF64, VMOVUPD, VADDPD, 3)

// func mulF64(dst, a, b *float64, n int)
KERNEL(·mulF64, VMOVUPD, VMULPD, 3)
