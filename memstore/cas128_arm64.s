//go:build !race && !sluice_nocas128

#include "textflag.h"

// func cas128(p *int64, old0, old1, new0, new1 int64) (swapped bool)
TEXT ·cas128(SB), NOSPLIT, $0-41
	MOVD	p+0(FP), R0
	MOVD	old0+8(FP), R1
	MOVD	old1+16(FP), R2
	MOVD	new0+24(FP), R3
	MOVD	new1+32(FP), R4
again:
	LDAXP	(R0), (R5, R6)
	CMP	R1, R5
	BNE	differ
	CMP	R2, R6
	BNE	differ
	STLXP	(R3, R4), (R0), R7
	CBNZ	R7, again // the pair changed between the load and the store
	MOVD	$1, R8
	MOVB	R8, swapped+40(FP)
	RET
differ:
	CLREX
	MOVB	ZR, swapped+40(FP)
	RET
