//go:build !race && !sluice_nocas128

#include "textflag.h"

// func cas128(p *int64, old0, old1, new0, new1 int64) (swapped bool)
TEXT ·cas128(SB), NOSPLIT, $0-41
	MOVQ p+0(FP), DI
	MOVQ old0+8(FP), AX
	MOVQ old1+16(FP), DX
	MOVQ new0+24(FP), BX
	MOVQ new1+32(FP), CX
	LOCK
	CMPXCHG16B (DI)
	SETEQ swapped+40(FP)
	RET
