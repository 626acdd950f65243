// Package kernels holds the numeric inner loops of the built-in engine on
// plain slices: GEMM, convolution lowering (im2col), pooling, softmax,
// normalisation and quantization. Every kernel here is a pure-Go reference
// whose doc comment states the loop it computes; faster versions (SIMD,
// blocking, threads) must match these references and are tested against them.
package kernels
