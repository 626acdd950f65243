//go:build ort

package ort

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"unsafe"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// elemSize is the byte width of one element of dt as ONNX Runtime stores
// it, or 0 for the types this binding does not exchange: strings, and the
// 4- and 2-bit types, which ONNX Runtime packs two or four to a byte while
// tensor.Tensor holds one per element.
func elemSize(dt tensor.DType) int {
	switch dt {
	case tensor.Float, tensor.Int32, tensor.Uint32:
		return 4
	case tensor.Double, tensor.Int64, tensor.Uint64:
		return 8
	case tensor.Float16, tensor.BFloat16, tensor.Int16, tensor.Uint16:
		return 2
	case tensor.Int8, tensor.Uint8, tensor.Bool,
		tensor.Float8E4M3FN, tensor.Float8E4M3FNUZ, tensor.Float8E5M2, tensor.Float8E5M2FNUZ:
		return 1
	}
	return 0
}

// dataView returns the address and length of the elements of a numeric
// slice, and the byte size of one element.
func dataView(data any) (p unsafe.Pointer, n int, size int) {
	switch d := data.(type) {
	case []float32:
		return slicePtr(d), len(d), 4
	case []float64:
		return slicePtr(d), len(d), 8
	case []int8:
		return slicePtr(d), len(d), 1
	case []uint8:
		return slicePtr(d), len(d), 1
	case []int16:
		return slicePtr(d), len(d), 2
	case []uint16:
		return slicePtr(d), len(d), 2
	case []int32:
		return slicePtr(d), len(d), 4
	case []uint32:
		return slicePtr(d), len(d), 4
	case []int64:
		return slicePtr(d), len(d), 8
	case []uint64:
		return slicePtr(d), len(d), 8
	case []bool:
		return slicePtr(d), len(d), 1
	}
	return nil, 0, 0
}

func slicePtr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// emptyData stands in for the buffer of an empty tensor: ONNX Runtime
// wants a non-null pointer even for zero bytes.
var emptyData [8]byte

// newValue wraps t's memory in an OrtValue without copying. The memory is
// pinned with pin, which must outlive the value.
func (l *Library) newValue(t *tensor.Tensor, pin *goruntime.Pinner) (uintptr, error) {
	size := elemSize(t.DType)
	if size == 0 {
		return 0, fmt.Errorf("element type %s cannot be passed to ONNX Runtime by this engine", t.DType)
	}
	p, n, goSize := dataView(t.Data)
	if goSize != size {
		return 0, fmt.Errorf("%s tensor holds %T", t.DType, t.Data)
	}
	shape := make([]int64, len(t.Shape))
	count := 1
	for i, d := range t.Shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", t.Shape)
		}
		shape[i] = int64(d)
		count *= d
	}
	if n != count {
		return 0, fmt.Errorf("shape %v needs %d elements, data has %d", t.Shape, count, n)
	}
	if p == nil {
		p = unsafe.Pointer(&emptyData[0])
	} else {
		pin.Pin(p)
	}
	var shapePtr unsafe.Pointer
	if len(shape) > 0 {
		shapePtr = unsafe.Pointer(&shape[0])
	}
	var v uintptr
	err := l.check("CreateTensorWithDataAsOrtValue",
		l.api.CreateTensorWithDataAsOrtValue(l.cpuMem, p, uintptr(n*size), shapePtr, uintptr(len(shape)), int32(t.DType), &v))
	goruntime.KeepAlive(shape)
	return v, err
}

// tensorOf copies an output OrtValue into a new tensor.
func (l *Library) tensorOf(v uintptr) (*tensor.Tensor, error) {
	var vt int32
	if err := l.check("GetValueType", l.api.GetValueType(v, &vt)); err != nil {
		return nil, err
	}
	const onnxTypeTensor = 1
	if vt != onnxTypeTensor {
		return nil, fmt.Errorf("is a %s, only tensors are supported", onnxTypeName(vt))
	}
	var tsi uintptr
	if err := l.check("GetTensorTypeAndShape", l.api.GetTensorTypeAndShape(v, &tsi)); err != nil {
		return nil, err
	}
	dt, dims, err := l.typeAndShape(tsi)
	l.api.ReleaseTensorTypeAndShapeInfo(tsi)
	if err != nil {
		return nil, err
	}
	size := elemSize(dt)
	if size == 0 {
		return nil, fmt.Errorf("element type %s is not supported by this engine", dt)
	}
	shape := make([]int, len(dims))
	for i, d := range dims {
		shape[i] = int(d)
	}
	t := tensor.New(dt, shape...)
	dst, n, _ := dataView(t.Data)
	if n == 0 {
		return t, nil
	}
	var src unsafe.Pointer
	if err := l.check("GetTensorMutableData", l.api.GetTensorMutableData(v, &src)); err != nil {
		return nil, err
	}
	copy(unsafeBytes(dst, n*size), unsafeBytes(src, n*size))
	return t, nil
}

// unsafeBytes views n bytes at p.
func unsafeBytes(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
