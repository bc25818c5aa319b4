#include "textflag.h"

// The AVX2 kernels' common parts: a 6×16 tile of C in the twelve
// accumulators Y4–Y15 (row r in Y(4+2r), Y(5+2r)), C at DX with row
// stride R8 bytes.

// ZERO_TILE256 clears the accumulators.
#define ZERO_TILE256 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11 \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y13, Y13, Y13 \
	VXORPS Y14, Y14, Y14 \
	VXORPS Y15, Y15, Y15

// STEP256 is one step of depth: B's two vectors at B0 and B1 into Y0,
// Y1, then two rows at a time their values of A, row r's at address Ar,
// broadcast into Y2 and Y3 and multiplied in (FMA_ROWS256).
#define FMA_ROWS256(A, B, LO0, HI0, LO1, HI1) \
	VBROADCASTSS A, Y2 \
	VBROADCASTSS B, Y3 \
	VFMADD231PS Y0, Y2, LO0 \
	VFMADD231PS Y1, Y2, HI0 \
	VFMADD231PS Y0, Y3, LO1 \
	VFMADD231PS Y1, Y3, HI1

#define STEP256(B0, B1, A0, A1, A2, A3, A4, A5) \
	VMOVUPS B0, Y0 \
	VMOVUPS B1, Y1 \
	FMA_ROWS256(A0, A1, Y4, Y5, Y6, Y7) \
	FMA_ROWS256(A2, A3, Y8, Y9, Y10, Y11) \
	FMA_ROWS256(A4, A5, Y12, Y13, Y14, Y15)

// PREFETCH_ROW prefetches the row of C at R10 — its first line and the
// line LAST bytes in, the row's last float — and moves R10 down a row
// (R8 bytes). Both kernels' PREFETCH_C use it.
#define PREFETCH_ROW(LAST) \
	PREFETCHT0 (R10) \
	PREFETCHT0 LAST(R10) \
	ADDQ R8, R10

// PREFETCH_ROWS6 prefetches six rows of C from R10 as PREFETCH_ROW does,
// leaving R10 at the sixth: the AVX2 kernel's tile, half the AVX-512
// kernel's.
#define PREFETCH_ROWS6(LAST) \
	PREFETCH_ROW(LAST) \
	PREFETCH_ROW(LAST) \
	PREFETCH_ROW(LAST) \
	PREFETCH_ROW(LAST) \
	PREFETCH_ROW(LAST) \
	PREFETCHT0 (R10) \
	PREFETCHT0 LAST(R10)

// ADD_ROW adds a row of accumulators into C at DX — LO at the row's
// start, HI at HIOFF bytes in — and SET_ROW stores them there. Both
// kernels' ADD_TILE and SET_TILE use them.
#define ADD_ROW(LO, HI, HIOFF) \
	VADDPS (DX), LO, LO \
	VADDPS HIOFF(DX), HI, HI \
	VMOVUPS LO, (DX) \
	VMOVUPS HI, HIOFF(DX)

#define SET_ROW(LO, HI, HIOFF) \
	VMOVUPS LO, (DX) \
	VMOVUPS HI, HIOFF(DX)

// ROWS6 applies ROW (ADD_ROW or SET_ROW) to six rows, moving DX down C
// (R8 bytes a row) between them: the AVX2 kernel's tile, half the
// AVX-512 kernel's.
#define ROWS6(ROW, L0, H0, L1, H1, L2, H2, L3, H3, L4, H4, L5, H5, HIOFF) \
	ROW(L0, H0, HIOFF) \
	ADDQ R8, DX \
	ROW(L1, H1, HIOFF) \
	ADDQ R8, DX \
	ROW(L2, H2, HIOFF) \
	ADDQ R8, DX \
	ROW(L3, H3, HIOFF) \
	ADDQ R8, DX \
	ROW(L4, H4, HIOFF) \
	ADDQ R8, DX \
	ROW(L5, H5, HIOFF)

// PREFETCH_C256 prefetches the 6×16 tile of C at DX (R10 scratch), the
// last row without moving R10 on.
#define PREFETCH_C256 \
	MOVQ DX, R10 \
	PREFETCH_ROWS6(60)

// ADD_TILE256 adds the accumulators into C and SET_TILE256 stores them,
// a row at a time, moving DX down C.
#define ADD_TILE256 \
	ROWS6(ADD_ROW, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, 32)

#define SET_TILE256 \
	ROWS6(SET_ROW, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15, 32)

// FINISH ends a kernel: its accumulators added into C (ADDS) when the
// bool argument at ADD is set, else stored there (SETS). FINISH_TILE256
// ends an AVX2 kernel's full tile.
#define FINISH(ADD, ADDS, SETS) \
	MOVBLZX ADD, R9 \
	TESTL R9, R9 \
	JZ setTile \
	ADDS \
	VZEROUPPER \
	RET \
setTile: \
	SETS \
	VZEROUPPER \
	RET

#define FINISH_TILE256(ADD) FINISH(ADD, ADD_TILE256, SET_TILE256)

// START_TILE256 begins an AVX2 kernel's tile: C's address from C and its
// row stride in elements from LDC (into DX and R8, in bytes), the
// accumulators cleared and the tile of C prefetched.
#define START_TILE256(C, LDC) \
	MOVQ C, DX \
	MOVQ LDC, R8 \
	SHLQ $2, R8 \
	ZERO_TILE256 \
	PREFETCH_C256

// ROW_BASES sets up the kernels that read an operand row by row at a
// stride, given in elements in R9: R9 in bytes, and R11 the row three
// rows below BASE, so that six rows (or four) are (BASE), (BASE)(R9*1),
// (BASE)(R9*2), (R11), (R11)(R9*1), (R11)(R9*2).
#define ROW_BASES(BASE) \
	SHLQ $2, R9 \
	LEAQ (BASE)(R9*2), R11 \
	ADDQ R9, R11

// func kernel6x16(kc int, a, b, c *float32, ldc int, add bool)
// AVX2/FMA: a 6×16 tile in twelve YMM accumulators (Y4–Y15), four steps
// of depth a turn of the loop. It prefetches its tile of C before the
// loop, as the AVX-512 kernels do: 1024³ on one Zen 4 core 1.04–1.29×
// faster in six alternated rounds, smaller and shallower products level
// or faster (bench/results/current/avx2-c-prefetch-2026-12-02-zen4.txt).
TEXT ·kernel6x16(SB), NOSPLIT, $0-41
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	START_TILE256(c+24(FP), ldc+32(FP))

	CMPQ CX, $4
	JLT  tail

loop4:
	PREFETCHT0 512(DI)
	STEP256((DI), 32(DI), (SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI))
	STEP256(64(DI), 96(DI), 24(SI), 28(SI), 32(SI), 36(SI), 40(SI), 44(SI))
	PREFETCHT0 576(DI)
	STEP256(128(DI), 160(DI), 48(SI), 52(SI), 56(SI), 60(SI), 64(SI), 68(SI))
	STEP256(192(DI), 224(DI), 72(SI), 76(SI), 80(SI), 84(SI), 88(SI), 92(SI))
	ADDQ $96, SI
	ADDQ $256, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  loop4

tail:
	TESTQ CX, CX
	JZ    store

loop1:
	STEP256((DI), 32(DI), (SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI))
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop1

store:
	FINISH_TILE256(add+40(FP))

// func kernel6x16Rows(kc int, a *float32, lda int, b, c *float32, ldc int, add bool)
// kernel6x16 reading A where it lies, unpacked: row i of the 6×kc block
// at a[i·lda:] (lda in elements), two bases three rows apart (SI, R11)
// indexed by R9 = lda bytes; for products too narrow to repay packing A
// (gemm.go, directA).
TEXT ·kernel6x16Rows(SB), NOSPLIT, $0-49
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	ROW_BASES(SI)
	MOVQ b+24(FP), DI
	START_TILE256(c+32(FP), ldc+40(FP))

	CMPQ CX, $4
	JLT  rowsTail

rowsLoop4:
	PREFETCHT0 512(DI)
	STEP256((DI), 32(DI), (SI), (SI)(R9*1), (SI)(R9*2), (R11), (R11)(R9*1), (R11)(R9*2))
	STEP256(64(DI), 96(DI), 4(SI), 4(SI)(R9*1), 4(SI)(R9*2), 4(R11), 4(R11)(R9*1), 4(R11)(R9*2))
	PREFETCHT0 576(DI)
	STEP256(128(DI), 160(DI), 8(SI), 8(SI)(R9*1), 8(SI)(R9*2), 8(R11), 8(R11)(R9*1), 8(R11)(R9*2))
	STEP256(192(DI), 224(DI), 12(SI), 12(SI)(R9*1), 12(SI)(R9*2), 12(R11), 12(R11)(R9*1), 12(R11)(R9*2))
	ADDQ $16, SI
	ADDQ $16, R11
	ADDQ $256, DI
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  rowsLoop4

rowsTail:
	TESTQ CX, CX
	JZ    rowsStore

rowsLoop1:
	STEP256((DI), 32(DI), (SI), (SI)(R9*1), (SI)(R9*2), (R11), (R11)(R9*1), (R11)(R9*2))
	ADDQ $4, SI
	ADDQ $4, R11
	ADDQ $64, DI
	DECQ CX
	JNZ  rowsLoop1

rowsStore:
	FINISH_TILE256(add+48(FP))

// The AVX-512 kernels' common parts: a 12×32 tile of C in the 24
// accumulators Z8–Z31 (row r in Z(8+2r), Z(9+2r)), C at DX with row
// stride R8 bytes, B's panel at DI.

// ZERO_TILE512 clears the accumulators.
#define ZERO_TILE512 \
	VXORPS Z8, Z8, Z8 \
	VXORPS Z9, Z9, Z9 \
	VXORPS Z10, Z10, Z10 \
	VXORPS Z11, Z11, Z11 \
	VXORPS Z12, Z12, Z12 \
	VXORPS Z13, Z13, Z13 \
	VXORPS Z14, Z14, Z14 \
	VXORPS Z15, Z15, Z15 \
	VXORPS Z16, Z16, Z16 \
	VXORPS Z17, Z17, Z17 \
	VXORPS Z18, Z18, Z18 \
	VXORPS Z19, Z19, Z19 \
	VXORPS Z20, Z20, Z20 \
	VXORPS Z21, Z21, Z21 \
	VXORPS Z22, Z22, Z22 \
	VXORPS Z23, Z23, Z23 \
	VXORPS Z24, Z24, Z24 \
	VXORPS Z25, Z25, Z25 \
	VXORPS Z26, Z26, Z26 \
	VXORPS Z27, Z27, Z27 \
	VXORPS Z28, Z28, Z28 \
	VXORPS Z29, Z29, Z29 \
	VXORPS Z30, Z30, Z30 \
	VXORPS Z31, Z31, Z31

// PREFETCH_C512 prefetches the 12×32 tile of C at DX (R10 scratch), the
// last row without moving R10 on.
#define PREFETCH_C512 \
	MOVQ DX, R10 \
	PREFETCH_ROWS6(124) \
	ADDQ R8, R10 \
	PREFETCH_ROWS6(124)

// STEP512 is one step of depth: B's two vectors at DI into Z0, Z1, then
// each row's value of A, row r's at address Ar, broadcast and multiplied
// in (FMA_ROWS512, FMA_ROW512); B's panel prefetched 1024 bytes ahead.
#define FMA_ROW512(A, LO, HI) \
	VBROADCASTSS A, Z2 \
	VFMADD231PS Z0, Z2, LO \
	VFMADD231PS Z1, Z2, HI

#define FMA_ROWS4_512(A0, A1, A2, A3) \
	FMA_ROW512(A0, Z8, Z9) \
	FMA_ROW512(A1, Z10, Z11) \
	FMA_ROW512(A2, Z12, Z13) \
	FMA_ROW512(A3, Z14, Z15)

#define FMA_ROWS8_512(A0, A1, A2, A3, A4, A5, A6, A7) \
	FMA_ROWS4_512(A0, A1, A2, A3) \
	FMA_ROW512(A4, Z16, Z17) \
	FMA_ROW512(A5, Z18, Z19) \
	FMA_ROW512(A6, Z20, Z21) \
	FMA_ROW512(A7, Z22, Z23)

#define FMA_ROWS512(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11) \
	FMA_ROWS8_512(A0, A1, A2, A3, A4, A5, A6, A7) \
	FMA_ROW512(A8, Z24, Z25) \
	FMA_ROW512(A9, Z26, Z27) \
	FMA_ROW512(A10, Z28, Z29) \
	FMA_ROW512(A11, Z30, Z31)

#define STEP512(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11) \
	PREFETCHT0 1024(DI) \
	VMOVUPS (DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	FMA_ROWS512(A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11) \
	ADDQ $128, DI

// ADD_TILE512 adds the accumulators into C and SET_TILE512 stores them,
// a row at a time, moving DX down C.
#define ADD_TILE512 \
	ROWS6(ADD_ROW, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, 64) \
	ADDQ R8, DX \
	ROWS6(ADD_ROW, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31, 64)

#define SET_TILE512 \
	ROWS6(SET_ROW, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, 64) \
	ADDQ R8, DX \
	ROWS6(SET_ROW, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31, 64)

// FINISH_TILE512 ends an AVX-512 kernel's full tile (FINISH).
#define FINISH_TILE512(ADD) FINISH(ADD, ADD_TILE512, SET_TILE512)

// START_TILE512 begins an AVX-512 kernel's tile, as START_TILE256 an
// AVX2 one's: C's address from C and its row stride in elements from LDC
// (into DX and R8, in bytes), the accumulators cleared and the tile of C
// prefetched.
#define START_TILE512(C, LDC) \
	MOVQ C, DX \
	MOVQ LDC, R8 \
	SHLQ $2, R8 \
	ZERO_TILE512 \
	PREFETCH_C512

// func kernel12x32(kc int, a, b, c *float32, ldc int, add bool)
// AVX-512: a 12×32 tile in 24 ZMM accumulators (Z8–Z31).
// Before the loop it prefetches the tile of C (each row's first and last
// line), and each step the panels of A and B a few steps ahead: A's
// block lives in L2 and B's panel is reloaded from L2 or L3 once per
// block of A, and on a Zen 5 core the loads of C at the tile's end and
// the misses on the panels cost 1024³ products 7-10% (BENCHMARKS.md,
// Compute kernels, Zen 5).
TEXT ·kernel12x32(SB), NOSPLIT, $0-41
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	START_TILE512(c+24(FP), ldc+32(FP))
loop512:
	PREFETCHT0 384(SI)
	STEP512(0(SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI), 24(SI), 28(SI), 32(SI), 36(SI), 40(SI), 44(SI))
	ADDQ $48, SI
	DECQ CX
	JNZ loop512
	FINISH_TILE512(add+40(FP))

// func kernel12x32Rows(kc int, a *float32, lda int, b, c *float32, ldc int, add bool)
// kernel12x32 reading A where it lies, unpacked: row i of the 12×kc
// block at a[i·lda:] (lda in elements), four bases three rows apart
// (SI, R11, R12, R13) indexed by R9 = lda bytes; for products too narrow
// to repay packing A (gemm.go, directA).
TEXT ·kernel12x32Rows(SB), NOSPLIT, $0-49
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	LEAQ (SI)(R9*2), R11
	ADDQ R9, R11
	LEAQ (R11)(R9*2), R12
	ADDQ R9, R12
	LEAQ (R12)(R9*2), R13
	ADDQ R9, R13
	MOVQ b+24(FP), DI
	START_TILE512(c+32(FP), ldc+40(FP))
loopRows512:
	STEP512((SI), (SI)(R9*1), (SI)(R9*2), (R11), (R11)(R9*1), (R11)(R9*2), (R12), (R12)(R9*1), (R12)(R9*2), (R13), (R13)(R9*1), (R13)(R9*2))
	ADDQ $4, SI
	ADDQ $4, R11
	ADDQ $4, R12
	ADDQ $4, R13
	DECQ CX
	JNZ loopRows512
	FINISH_TILE512(add+48(FP))

// func kernel6x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel6x16 reading B where it lies, unpacked: row l of the kc×16
// block at b[l·ldb:] (ldb in elements), four rows a turn from two bases
// (DI, R11 = DI + 3·ldb) indexed by R9 = ldb bytes and moved on by R12 =
// four rows, and the four rows two turns ahead prefetched (R13); for
// products too short to repay packing B (gemm.go, directB).
TEXT ·kernel6x16ColsB(SB), NOSPLIT, $0-49
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R9
	ROW_BASES(DI)
	LEAQ (R9*4), R12
	START_TILE256(c+32(FP), ldc+40(FP))

	CMPQ CX, $4
	JLT  colsTail

colsLoop4:
	LEAQ (DI)(R12*2), R13
	PREFETCHT0 (R13)
	PREFETCHT0 (R13)(R9*1)
	PREFETCHT0 (R13)(R9*2)
	PREFETCHT0 (R11)(R12*2)
	STEP256((DI), 32(DI), (SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI))
	STEP256((DI)(R9*1), 32(DI)(R9*1), 24(SI), 28(SI), 32(SI), 36(SI), 40(SI), 44(SI))
	STEP256((DI)(R9*2), 32(DI)(R9*2), 48(SI), 52(SI), 56(SI), 60(SI), 64(SI), 68(SI))
	STEP256((R11), 32(R11), 72(SI), 76(SI), 80(SI), 84(SI), 88(SI), 92(SI))
	ADDQ $96, SI
	ADDQ R12, DI
	ADDQ R12, R11
	SUBQ $4, CX
	CMPQ CX, $4
	JGE  colsLoop4

colsTail:
	TESTQ CX, CX
	JZ    colsStore

colsLoop1:
	STEP256((DI), 32(DI), (SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI))
	ADDQ $24, SI
	ADDQ R9, DI
	DECQ CX
	JNZ  colsLoop1

colsStore:
	FINISH_TILE256(add+48(FP))

// func kernel12x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel12x32 reading B where it lies, unpacked: row l of the kc×32
// block at b[l·ldb:] (ldb in elements, R9 in bytes), the row eight rows
// ahead prefetched (R13 = eight rows), A's packed panel as kernel12x32
// reads it; for products too short to repay packing B (gemm.go,
// directB).
TEXT ·kernel12x32ColsB(SB), NOSPLIT, $0-49
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ ldb+24(FP), R9
	SHLQ $2, R9
	LEAQ (R9*8), R13
	START_TILE512(c+32(FP), ldc+40(FP))
loopColsB512:
	PREFETCHT0 384(SI)
	PREFETCHT0 (DI)(R13*1)
	PREFETCHT0 64(DI)(R13*1)
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	FMA_ROWS512(0(SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI), 24(SI), 28(SI), 32(SI), 36(SI), 40(SI), 44(SI))
	ADDQ $48, SI
	ADDQ R9, DI
	DECQ CX
	JNZ loopColsB512
	FINISH_TILE512(add+48(FP))

// The short AVX-512 kernels: kernel12x32 and kernel12x32ColsB for the
// first 4 or 8 rows of a packed 12-row panel of A (a product's ragged
// last panel, where the panels are 12 rows apart per step of depth as
// ever), writing only those rows of C — the rows past them cost the full
// kernel a third or two of its time for nothing (a 64-row product is
// five panels and a 4-row one). Rows r < 4 (8) in the same accumulators
// as kernel12x32's, added in the same order: the same bits.

// ZERO_ROWS4_512 and ZERO_ROWS8_512 clear the first 4 or 8 rows'
// accumulators.
#define ZERO_ROWS4_512 \
	VXORPS Z8, Z8, Z8 \
	VXORPS Z9, Z9, Z9 \
	VXORPS Z10, Z10, Z10 \
	VXORPS Z11, Z11, Z11 \
	VXORPS Z12, Z12, Z12 \
	VXORPS Z13, Z13, Z13 \
	VXORPS Z14, Z14, Z14 \
	VXORPS Z15, Z15, Z15

#define ZERO_ROWS8_512 \
	ZERO_ROWS4_512 \
	VXORPS Z16, Z16, Z16 \
	VXORPS Z17, Z17, Z17 \
	VXORPS Z18, Z18, Z18 \
	VXORPS Z19, Z19, Z19 \
	VXORPS Z20, Z20, Z20 \
	VXORPS Z21, Z21, Z21 \
	VXORPS Z22, Z22, Z22 \
	VXORPS Z23, Z23, Z23

// PREFETCH_C4_512 and PREFETCH_C8_512 prefetch the 4 or 8 rows of C at
// DX (R10 scratch).
#define PREFETCH_C4_512 \
	MOVQ DX, R10 \
	PREFETCH_ROW(124) \
	PREFETCH_ROW(124) \
	PREFETCH_ROW(124) \
	PREFETCHT0 (R10) \
	PREFETCHT0 124(R10)

#define PREFETCH_C8_512 \
	MOVQ DX, R10 \
	PREFETCH_ROWS6(124) \
	ADDQ R8, R10 \
	PREFETCH_ROW(124) \
	PREFETCHT0 (R10) \
	PREFETCHT0 124(R10)

// ROWS4 applies ROW (ADD_ROW or SET_ROW) to four rows, moving DX down C
// (R8 bytes a row) between them.
#define ROWS4(ROW, L0, H0, L1, H1, L2, H2, L3, H3, HIOFF) \
	ROW(L0, H0, HIOFF) \
	ADDQ R8, DX \
	ROW(L1, H1, HIOFF) \
	ADDQ R8, DX \
	ROW(L2, H2, HIOFF) \
	ADDQ R8, DX \
	ROW(L3, H3, HIOFF)

// ADD_ROWS4_512 and ADD_ROWS8_512 add the first 4 or 8 rows'
// accumulators into C, SET_ROWS4_512 and SET_ROWS8_512 store them, a row
// at a time, moving DX down C (FINISH's ADDS and SETS).
#define ADD_ROWS4_512 ROWS4(ADD_ROW, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, 64)
#define SET_ROWS4_512 ROWS4(SET_ROW, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, 64)

#define ADD_ROWS8_512 \
	ADD_ROWS4_512 \
	ADDQ R8, DX \
	ROWS4(ADD_ROW, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, 64)

#define SET_ROWS8_512 \
	SET_ROWS4_512 \
	ADDQ R8, DX \
	ROWS4(SET_ROW, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, 64)

// SHORT_START loads the arguments common to the short kernels: kc into
// CX, A's panel into SI, B into DI, C's address and row stride (in
// bytes) from C and LDC into DX and R8.
#define SHORT_START(C, LDC) \
	MOVQ kc+0(FP), CX \
	MOVQ a+8(FP), SI \
	MOVQ b+16(FP), DI \
	MOVQ C, DX \
	MOVQ LDC, R8 \
	SHLQ $2, R8

// SHORT_KERNEL is a short kernel's body after SHORT_START (and, reading
// B unpacked, ROWS_AHEAD8): its accumulators cleared (ZERO), its rows
// of C prefetched (PREFETCH), kc steps of depth (STEP), and FINISH with
// the bool argument at ADD, ADDS and SETS.
#define SHORT_KERNEL(ZERO, PREFETCH, STEP, ADD, ADDS, SETS) \
	ZERO \
	PREFETCH \
shortLoop: \
	STEP \
	DECQ CX \
	JNZ shortLoop \
	FINISH(ADD, ADDS, SETS)

// PANEL4 and PANEL8 multiply B's two vectors (Z0, Z1) by the first 4
// or 8 values of A's step at SI. SHORT_STEP is one step of depth of a
// short kernel over B's packed panel at DI, SHORT_STEP_COLSB one over B
// read unpacked at DI (row stride R9 bytes, R13 = eight rows ahead
// prefetched), as kernel12x32's and kernel12x32ColsB's loops.
#define PANEL4 FMA_ROWS4_512(0(SI), 4(SI), 8(SI), 12(SI))
#define PANEL8 FMA_ROWS8_512(0(SI), 4(SI), 8(SI), 12(SI), 16(SI), 20(SI), 24(SI), 28(SI))

#define SHORT_STEP(PANEL) \
	PREFETCHT0 384(SI) \
	PREFETCHT0 1024(DI) \
	VMOVUPS (DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	PANEL \
	ADDQ $128, DI \
	ADDQ $48, SI

#define SHORT_STEP_COLSB(PANEL) \
	PREFETCHT0 384(SI) \
	PREFETCHT0 (DI)(R13*1) \
	PREFETCHT0 64(DI)(R13*1) \
	VMOVUPS (DI), Z0 \
	VMOVUPS 64(DI), Z1 \
	PANEL \
	ADDQ $48, SI \
	ADDQ R9, DI

// ROWS_AHEAD8 turns B's row stride in R9 from elements into bytes and
// sets R13 to eight rows: the unpacked-B short kernels' prefetch
// distance.
#define ROWS_AHEAD8 \
	SHLQ $2, R9 \
	LEAQ (R9*8), R13

// func kernel4x32(kc int, a, b, c *float32, ldc int, add bool)
// kernel12x32 for the first 4 rows of its panel of A.
TEXT ·kernel4x32(SB), NOSPLIT, $0-41
	SHORT_START(c+24(FP), ldc+32(FP))
	SHORT_KERNEL(ZERO_ROWS4_512, PREFETCH_C4_512, SHORT_STEP(PANEL4), add+40(FP), ADD_ROWS4_512, SET_ROWS4_512)

// func kernel8x32(kc int, a, b, c *float32, ldc int, add bool)
// kernel12x32 for the first 8 rows of its panel of A.
TEXT ·kernel8x32(SB), NOSPLIT, $0-41
	SHORT_START(c+24(FP), ldc+32(FP))
	SHORT_KERNEL(ZERO_ROWS8_512, PREFETCH_C8_512, SHORT_STEP(PANEL8), add+40(FP), ADD_ROWS8_512, SET_ROWS8_512)

// func kernel4x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel12x32ColsB for the first 4 rows of its panel of A.
TEXT ·kernel4x32ColsB(SB), NOSPLIT, $0-49
	SHORT_START(c+32(FP), ldc+40(FP))
	MOVQ ldb+24(FP), R9
	ROWS_AHEAD8
	SHORT_KERNEL(ZERO_ROWS4_512, PREFETCH_C4_512, SHORT_STEP_COLSB(PANEL4), add+48(FP), ADD_ROWS4_512, SET_ROWS4_512)

// func kernel8x32ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel12x32ColsB for the first 8 rows of its panel of A.
TEXT ·kernel8x32ColsB(SB), NOSPLIT, $0-49
	SHORT_START(c+32(FP), ldc+40(FP))
	MOVQ ldb+24(FP), R9
	ROWS_AHEAD8
	SHORT_KERNEL(ZERO_ROWS8_512, PREFETCH_C8_512, SHORT_STEP_COLSB(PANEL8), add+48(FP), ADD_ROWS8_512, SET_ROWS8_512)

// The short AVX2 kernels: kernel6x16 and kernel6x16ColsB for the first
// 2 or 4 rows of a packed 6-row panel of A, as the AVX-512 ones above
// (a 32-row product is five full panels and one of 2 rows), in
// kernel6x16's accumulators (row r in Y(4+2r), Y(5+2r)), added in its
// order: the same bits. One step of depth a turn.

// ZERO_ROWS2_256 and ZERO_ROWS4_256 clear the first 2 or 4 rows'
// accumulators.
#define ZERO_ROWS2_256 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

#define ZERO_ROWS4_256 \
	ZERO_ROWS2_256 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

// PREFETCH_C2_256 and PREFETCH_C4_256 prefetch the 2 or 4 rows of C at
// DX (R10 scratch).
#define PREFETCH_C2_256 \
	MOVQ DX, R10 \
	PREFETCH_ROW(60) \
	PREFETCHT0 (R10) \
	PREFETCHT0 60(R10)

#define PREFETCH_C4_256 \
	MOVQ DX, R10 \
	PREFETCH_ROW(60) \
	PREFETCH_ROW(60) \
	PREFETCH_ROW(60) \
	PREFETCHT0 (R10) \
	PREFETCHT0 60(R10)

// ADD_ROWS2_256, ADD_ROWS4_256, SET_ROWS2_256 and SET_ROWS4_256 are
// ADD_ROWS4_512's and SET_ROWS4_512's AVX2 counterparts.
#define ADD_ROWS2_256 \
	ADD_ROW(Y4, Y5, 32) \
	ADDQ R8, DX \
	ADD_ROW(Y6, Y7, 32)

#define SET_ROWS2_256 \
	SET_ROW(Y4, Y5, 32) \
	ADDQ R8, DX \
	SET_ROW(Y6, Y7, 32)

#define ADD_ROWS4_256 ROWS4(ADD_ROW, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, 32)
#define SET_ROWS4_256 ROWS4(SET_ROW, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, 32)

// PANEL2_256 and PANEL4_256 multiply B's two vectors (Y0, Y1) by the
// first 2 or 4 values of A's step at SI. SHORT_STEP256 is one step of
// depth over B's packed panel at DI, SHORT_STEP256_COLSB one over B read
// unpacked at DI (row stride R9 bytes, the row R13 bytes ahead
// prefetched).
#define PANEL2_256 FMA_ROWS256(0(SI), 4(SI), Y4, Y5, Y6, Y7)
#define PANEL4_256 PANEL2_256 \
	FMA_ROWS256(8(SI), 12(SI), Y8, Y9, Y10, Y11)

#define SHORT_STEP256(PANEL) \
	VMOVUPS (DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	PANEL \
	ADDQ $64, DI \
	ADDQ $24, SI

#define SHORT_STEP256_COLSB(PANEL) \
	PREFETCHT0 (DI)(R13*1) \
	VMOVUPS (DI), Y0 \
	VMOVUPS 32(DI), Y1 \
	PANEL \
	ADDQ $24, SI \
	ADDQ R9, DI

// func kernel2x16(kc int, a, b, c *float32, ldc int, add bool)
// kernel6x16 for the first 2 rows of its panel of A.
TEXT ·kernel2x16(SB), NOSPLIT, $0-41
	SHORT_START(c+24(FP), ldc+32(FP))
	SHORT_KERNEL(ZERO_ROWS2_256, PREFETCH_C2_256, SHORT_STEP256(PANEL2_256), add+40(FP), ADD_ROWS2_256, SET_ROWS2_256)

// func kernel4x16(kc int, a, b, c *float32, ldc int, add bool)
// kernel6x16 for the first 4 rows of its panel of A.
TEXT ·kernel4x16(SB), NOSPLIT, $0-41
	SHORT_START(c+24(FP), ldc+32(FP))
	SHORT_KERNEL(ZERO_ROWS4_256, PREFETCH_C4_256, SHORT_STEP256(PANEL4_256), add+40(FP), ADD_ROWS4_256, SET_ROWS4_256)

// func kernel2x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel6x16ColsB for the first 2 rows of its panel of A.
TEXT ·kernel2x16ColsB(SB), NOSPLIT, $0-49
	SHORT_START(c+32(FP), ldc+40(FP))
	MOVQ ldb+24(FP), R9
	ROWS_AHEAD8
	SHORT_KERNEL(ZERO_ROWS2_256, PREFETCH_C2_256, SHORT_STEP256_COLSB(PANEL2_256), add+48(FP), ADD_ROWS2_256, SET_ROWS2_256)

// func kernel4x16ColsB(kc int, a, b *float32, ldb int, c *float32, ldc int, add bool)
// kernel6x16ColsB for the first 4 rows of its panel of A.
TEXT ·kernel4x16ColsB(SB), NOSPLIT, $0-49
	SHORT_START(c+32(FP), ldc+40(FP))
	MOVQ ldb+24(FP), R9
	ROWS_AHEAD8
	SHORT_KERNEL(ZERO_ROWS4_256, PREFETCH_C4_256, SHORT_STEP256_COLSB(PANEL4_256), add+48(FP), ADD_ROWS4_256, SET_ROWS4_256)
