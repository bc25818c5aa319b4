//go:build amd64 && !purego

#include "textflag.h"

// func stream64(dst, src *byte, n int)
//
// Copies n bytes (a positive multiple of 64; dst 16-byte aligned) with
// non-temporal stores, then fences them, so they are visible to other
// processors before any later store.
TEXT ·stream64(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
loop:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVNTO	X0, 0(DI)
	MOVNTO	X1, 16(DI)
	MOVNTO	X2, 32(DI)
	MOVNTO	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	SUBQ	$64, CX
	JNZ	loop
	SFENCE
	RET
