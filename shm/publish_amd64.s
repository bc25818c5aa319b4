//go:build amd64 && !purego

#include "textflag.h"

// func storePlain(w *atomic.Uint64, v uint64)
TEXT ·storePlain(SB), NOSPLIT, $0-16
	MOVQ	w+0(FP), AX
	MOVQ	v+8(FP), BX
	MOVQ	BX, 0(AX)
	RET
