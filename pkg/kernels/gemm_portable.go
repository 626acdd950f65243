package kernels

import "unsafe"

// goArch's kernels, on tiles of 4×8: A in panels of 4 rows, B in panels
// of 8 columns (tile, tileEp) or as 8 floats at b + offs[p] for step p
// (tileI, tileIEp: wideConv's column matrix read in place). Both read the
// same values in the same order, so their results are the same bit for
// bit: a packed panel is read through packedSteps.

// packedSteps are the offsets of the steps of a packed B panel, 8 floats
// apart, for the kernel's kc of at most 256 (slicing them checks kc).
var packedSteps = func() (s [256]int) {
	for p := range s {
		s[p] = 8 * p
	}
	return s
}()

func goTile(rows, kc int, a, b, c *float32, ldc int, accumulate bool) {
	goKernel(rows, kc, a, b, unsafe.SliceData(packedSteps[:kc]), c, ldc, accumulate)
}

func goTileI(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool) {
	goKernel(rows, kc, a, b, offs, c, ldc, accumulate)
}

func goTileEp(kc int, a, b, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
	goKernelEp(kc, a, b, unsafe.SliceData(packedSteps[:kc]), c, ldc, accumulate, bst, relu)
}

func goTileIEp(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
	goKernelEp(kc, a, b, offs, c, ldc, accumulate, bst, relu)
}

// goKernel computes rows rows of a tile (goTileSums) and stores them in
// C or adds them to it. It is compiled once, never inlined: when C
// already holds a NaN and so does the tile, the operand order the
// compiler gives the addition picks the payload, and every path to C
// must pick alike.
//
//go:noinline
func goKernel(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool) {
	var acc [4][8]float32
	goTileSums(&acc, kc, a, b, offs)
	cs := unsafe.Slice(c, (rows-1)*ldc+8)
	for i := 0; i < rows; i++ {
		row := cs[i*ldc : i*ldc+8]
		if accumulate {
			for j := range row {
				row[j] += acc[i][j]
			}
		} else {
			copy(row, acc[i][:])
		}
	}
}

// goKernelEp is goKernel for 4 rows followed by the row epilogue, row
// i's (b, s, t) at bst[3i:], while the tile is in L1: the same
// operations as goKernel then Epilogue.apply.
func goKernelEp(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
	goKernel(4, kc, a, b, offs, c, ldc, accumulate)
	cs := unsafe.Slice(c, 3*ldc+8)
	ep := (*[12]float32)(unsafe.Pointer(bst))
	for i := range 4 {
		epilogueRow(cs[i*ldc:i*ldc+8], ep[3*i], ep[3*i+1], ep[3*i+2], relu)
	}
}

// goTileSums computes the 4×8 products of kc steps of a packed A panel
// and of B (step p's 8 floats at b + offs[p]) into acc, in four passes of
// 4 rows by 2 columns. A pass holds its 8 sums in local variables, which
// the compiler keeps in registers: 8 independent chains of multiply-adds
// hide their latency, and the 8 sums with the 6 values a step loads fit
// the 16 floating-point registers of amd64. arm64 and amd64 v3 fuse each
// `+=` of a product into one FMA. On amd64 v1 a product and its addition
// are two instructions, and the compiler schedules a step's 8 products
// before its additions unless the sums feed another step in the same
// loop body: hence two steps a loop, the first of which then runs
// without spilling a product (1.4 times as fast as one step a loop on
// amd64 v1, the same on v3). A pointer steps through A and offs through
// B, so that the loop has no bounds checks; kc steps of both operands are
// there by contract.
//
// Every column is summed in step order from zero, whatever its lane, so
// its value does not depend on where its panel starts (wideConv's panels
// start elsewhere than Im2col's), bit for bit but for one case: the
// payload of a NaN product of two NaN factors, which the operand order
// the compiler gives each lane's multiplication picks.
func goTileSums(acc *[4][8]float32, kc int, a, b *float32, offs *int) {
	const mr, nr = 4, 8
	for j := 0; j < nr; j += 2 {
		var c00, c01, c10, c11, c20, c21, c30, c31 float32
		pa := unsafe.Pointer(a)
		pb := unsafe.Add(unsafe.Pointer(b), 4*j)
		os := unsafe.Slice(offs, kc)
		for ; len(os) >= 2; os = os[2:] {
			av := (*[2 * mr]float32)(pa)
			bv := (*[2]float32)(unsafe.Add(pb, 4*os[0]))
			a0, a1, a2, a3 := av[0], av[1], av[2], av[3]
			b0, b1 := bv[0], bv[1]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			bv = (*[2]float32)(unsafe.Add(pb, 4*os[1]))
			a0, a1, a2, a3 = av[4], av[5], av[6], av[7]
			b0, b1 = bv[0], bv[1]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
			pa = unsafe.Add(pa, 2*4*mr)
		}
		if len(os) == 1 {
			av := (*[mr]float32)(pa)
			bv := (*[2]float32)(unsafe.Add(pb, 4*os[0]))
			a0, a1, a2, a3 := av[0], av[1], av[2], av[3]
			b0, b1 := bv[0], bv[1]
			c00 += a0 * b0
			c01 += a0 * b1
			c10 += a1 * b0
			c11 += a1 * b1
			c20 += a2 * b0
			c21 += a2 * b1
			c30 += a3 * b0
			c31 += a3 * b1
		}
		acc[0][j], acc[0][j+1] = c00, c01
		acc[1][j], acc[1][j+1] = c10, c11
		acc[2][j], acc[2][j+1] = c20, c21
		acc[3][j], acc[3][j+1] = c30, c31
	}
}
