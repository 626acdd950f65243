package compare

import (
	"fmt"
	"slices"
	"testing"

	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// rowSource serves sample i as the single value i.
type rowSource struct {
	n     int
	calls [][2]int
	fail  int // start index that fails, -1 for none
}

func (s *rowSource) Samples() int { return s.n }
func (s *rowSource) Random() bool { return false }
func (s *rowSource) Close() error { return nil }
func (s *rowSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	s.calls = append(s.calls, [2]int{start, end})
	if start == s.fail {
		return nil, fmt.Errorf("samples [%d, %d): disk on fire", start, end)
	}
	x := make([]float32, end-start)
	for i := range x {
		x[i] = float32(start + i)
	}
	return Batch{"x": tensor.FromFloat32(x, end-start, 1)}, nil
}

func TestSourceBatches(t *testing.T) {
	cases := []struct {
		name              string
		n, start, end, bs int
		want              [][2]int
	}{
		{"even", 8, 0, 8, 4, [][2]int{{0, 4}, {4, 8}}},
		{"ragged tail", 10, 0, 10, 4, [][2]int{{0, 4}, {4, 8}, {8, 10}}},
		{"held-out tail", 10, 7, 10, 2, [][2]int{{7, 9}, {9, 10}}},
		{"one batch", 3, 0, 3, 100, [][2]int{{0, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := &rowSource{n: c.n, fail: -1}
			seq, err := SourceBatches(src, c.start, c.end, c.bs)
			if err != nil {
				t.Fatal(err)
			}
			next := c.start
			for b, err := range seq {
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range b["x"].Float32s() {
					if int(v) != next {
						t.Fatalf("sample %v, want %d", v, next)
					}
					next++
				}
			}
			if next != c.end || !slices.Equal(src.calls, c.want) {
				t.Errorf("read %v up to %d, want %v up to %d", src.calls, next, c.want, c.end)
			}
		})
	}
	for _, c := range []struct{ start, end, bs int }{{0, 5, 0}, {0, 11, 2}, {5, 5, 2}, {-1, 3, 1}} {
		if _, err := SourceBatches(&rowSource{n: 10}, c.start, c.end, c.bs); err == nil {
			t.Errorf("SourceBatches(%d, %d, %d): no error", c.start, c.end, c.bs)
		}
	}
	seq, err := SourceBatches(&rowSource{n: 6, fail: 2}, 0, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got error
	batches := 0
	for _, err := range seq {
		if err != nil {
			got = err
			break
		}
		batches++
	}
	if got == nil || batches != 1 {
		t.Errorf("read error: %v after %d batches, want the error after 1", got, batches)
	}
}

func TestLabelsOf(t *testing.T) {
	cases := []struct {
		name string
		t    *tensor.Tensor
		want []int64
		err  bool
	}{
		{"int64 [N]", tensor.FromInt64([]int64{3, 1, 4}, 3), []int64{3, 1, 4}, false},
		{"int32 [N,1]", &tensor.Tensor{DType: tensor.Int32, Shape: []int{2, 1}, Data: []int32{7, 0}}, []int64{7, 0}, false},
		{"whole floats", tensor.FromFloat32([]float32{2, 0}, 2), []int64{2, 0}, false},
		{"fractional floats", tensor.FromFloat32([]float32{2.5}, 1), nil, true},
		{"one-hot", tensor.FromFloat32([]float32{0, 1, 0, 1, 0, 0}, 2, 3), []int64{1, 0}, false},
		{"rank 3", tensor.FromFloat32(make([]float32, 8), 2, 2, 2), nil, true},
		{"bad data", &tensor.Tensor{DType: tensor.Int64, Shape: []int{3}, Data: []int64{1}}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := LabelsOf(c.t)
			if (err != nil) != c.err {
				t.Fatalf("error %v, want error %v", err, c.err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("labels %v, want %v", got, c.want)
			}
		})
	}
}
