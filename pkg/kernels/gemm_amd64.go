//go:build !noasm && amd64

package kernels

//go:generate sh -c "cd ../../internal/asm/gemm && go run . -out ../../../pkg/kernels/gemm_amd64.s -stubs ../../../pkg/kernels/gemm_stubs_amd64.go -pkg kernels"

// The AVX-512 kernels by height, in avx512Gemm.rows order (12, 8, 4, 2, 1):
// packed panels, rows of B ldb apart, rows of B at offsets.
var (
	avx512Tiles = [...]func(kc int, a, b, c *float32, ldc int, accumulate int){
		gemm12x32AVX512, gemm8x32AVX512, gemm4x32AVX512, gemm2x32AVX512, gemm1x32AVX512}
	avx512TilesS = [...]func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate int){
		gemm12x32AVX512S, gemm8x32AVX512S, gemm4x32AVX512S, gemm2x32AVX512S, gemm1x32AVX512S}
	avx512TilesI = [...]func(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate int){
		gemm12x32AVX512I, gemm8x32AVX512I, gemm4x32AVX512I, gemm2x32AVX512I, gemm1x32AVX512I}
)

// avx512ConvRows are the row tile kernels by stride (1, 2) and width
// (1 … convRowPixels).
var avx512ConvRows = [2][convRowPixels]func(kc int, x *float32, offs *int, w *float32, c *float32, accumulate int){
	{convRow1S1AVX512, convRow2S1AVX512, convRow3S1AVX512, convRow4S1AVX512, convRow5S1AVX512, convRow6S1AVX512, convRow7S1AVX512,
		convRow8S1AVX512, convRow9S1AVX512, convRow10S1AVX512, convRow11S1AVX512, convRow12S1AVX512, convRow13S1AVX512, convRow14S1AVX512},
	{convRow1S2AVX512, convRow2S2AVX512, convRow3S2AVX512, convRow4S2AVX512, convRow5S2AVX512, convRow6S2AVX512, convRow7S2AVX512,
		convRow8S2AVX512, convRow9S2AVX512, convRow10S2AVX512, convRow11S2AVX512, convRow12S2AVX512, convRow13S2AVX512, convRow14S2AVX512},
}

// avx512Height is the index in the avx512Tiles arrays of the kernel for a
// tile of rows rows (one of avx512Gemm.rows; smaller counts take 1).
func avx512Height(rows int) int {
	switch rows {
	case 12:
		return 0
	case 8:
		return 1
	case 4:
		return 2
	case 2:
		return 3
	}
	return 4
}

var avx512Gemm = &gemmArch{name: "avx512", mr: 12, nr: 32, kc: 256, mc: 144, nc: 1024, rows: []int{12, 8, 4, 2, 1},
	tile: func(rows, kc int, a, b, c *float32, ldc int, accumulate bool) {
		avx512Tiles[avx512Height(rows)](kc, a, b, c, ldc, flag(accumulate))
	},
	tileEp: func(kc int, a, b, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
		gemm12x32AVX512Ep(kc, a, b, c, ldc, flag(accumulate), bst, flag(relu))
	},
	tileS: func(rows, kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool) {
		avx512TilesS[avx512Height(rows)](kc, a, b, ldb, c, ldc, flag(accumulate))
	},
	tileSEp: func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
		gemm12x32AVX512SEp(kc, a, b, ldb, c, ldc, flag(accumulate), bst, flag(relu))
	},
	tileI: func(rows, kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool) {
		avx512TilesI[avx512Height(rows)](kc, a, b, offs, c, ldc, flag(accumulate))
	},
	tileIEp: func(kc int, a, b *float32, offs *int, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
		gemm12x32AVX512IEp(kc, a, b, offs, c, ldc, flag(accumulate), bst, flag(relu))
	},
	tileNarrow: func(kc int, a, b *float32, ldb int, c *float32, ldc int) {
		gemm12x16AVX512S(kc, a, b, ldb, c, ldc, 0)
	},
	tileA1: func(kc int, a, b, c *float32, ldc int, accumulate bool) {
		gemm1x32AVX512A1(kc, a, b, c, ldc, flag(accumulate))
	},
	tileSA1: func(kc int, a, b *float32, ldb int, c *float32, ldc int, accumulate bool) {
		gemm1x32AVX512A1S(kc, a, b, ldb, c, ldc, flag(accumulate))
	},
	convRow: func(pixels, stride, kc int, x *float32, offs *int, w *float32, c *float32, accumulate bool) {
		avx512ConvRows[stride-1][pixels-1](kc, x, offs, w, c, flag(accumulate))
	},
	convRowStore: func(tile *float32, pixels int, c *float32, ldc, channels int, ep, res *float32, relu, resFirst bool) {
		convRowStoreAVX512(tile, pixels, c, ldc, channels, ep, res, flag(relu)|2*flag(resFirst))
	}}

var avx2Gemm = &gemmArch{name: "avx2", mr: 6, nr: 16, kc: 256, mc: 120, nc: 1024, rows: []int{6, 4, 2, 1},
	tile: func(rows, kc int, a, b, c *float32, ldc int, accumulate bool) {
		acc := 0
		if accumulate {
			acc = 1
		}
		switch rows {
		case 6:
			gemm6x16AVX2(kc, a, b, c, ldc, acc)
		case 4:
			gemm4x16AVX2(kc, a, b, c, ldc, acc)
		case 2:
			gemm2x16AVX2(kc, a, b, c, ldc, acc)
		default:
			gemm1x16AVX2(kc, a, b, c, ldc, acc)
		}
	},
	tileEp: func(kc int, a, b, c *float32, ldc int, accumulate bool, bst *float32, relu bool) {
		gemm6x16AVX2Ep(kc, a, b, c, ldc, flag(accumulate), bst, flag(relu))
	}}

// gemmArches lists the micro-kernel families this CPU runs, widest first.
func gemmArches() []*gemmArch {
	var as []*gemmArch
	if hasAVX512 {
		as = append(as, avx512Gemm)
	}
	if hasAVX2 {
		as = append(as, avx2Gemm)
	}
	return append(as, goArch)
}

var activeGemm = gemmArches()[0]
