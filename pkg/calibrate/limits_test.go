package calibrate

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coreaiq/coreaiq/internal/testmodels"
	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestImageSizeLimit: an image whose header claims more than
// MaxImagePixels is refused from its header, before any pixel memory is
// allocated; the message names the file and the size.
func TestImageSizeLimit(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"1000000×1000000 in a tiny PNG", testmodels.PNGClaiming(1000000, 1000000), "the png header says 1000000×1000000 pixels, over the limit of 64 megapixels"},
		{"20000×20000", testmodels.PNGClaiming(20000, 20000), "the png header says 20000×20000 pixels, over the limit of 64 megapixels"},
		{"zero width", testmodels.PNGClaiming(0, 10), "png: invalid format"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "huge.png")
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			im := config.Images{Dir: dir, Scale: 255, Layout: "NCHW", Color: "RGB", DType: "float32", File: "c.yaml", Line: 3}
			src, err := Open([]runtime.IOInfo{{Name: "image", DType: tensor.Float, Shape: []int64{-1, 3, -1, -1}}}, nil, &im)
			if err == nil {
				_, err = src.Batch(0, 1)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("err = %v, want it to name %s and say %q", err, path, tt.want)
			}
		})
	}
}

// FuzzImageHeader: any bytes decode to an image within MaxImagePixels or
// fail with an error naming the file; never a panic, never a decode of
// what the header says is too large.
func FuzzImageHeader(f *testing.F) {
	f.Add(testmodels.PNGClaiming(1000000, 1000000))
	f.Add(testmodels.PNGClaiming(3, 2))
	small := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	small.Set(1, 1, color.NRGBA{R: 200, A: 255})
	var pb, jb bytes.Buffer
	png.Encode(&pb, small)
	jpeg.Encode(&jb, small, nil)
	f.Add(pb.Bytes())
	f.Add(jb.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := decodeImage(bytes.NewReader(data), "f.png")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.png: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if b := img.Bounds(); int64(b.Dx())*int64(b.Dy()) > MaxImagePixels {
			t.Fatalf("decoded a %v image, over the limit", b)
		}
	})
}

// TestRandomDataLimit: random data refuses a sample it cannot allocate,
// before allocating, naming the input.
func TestRandomDataLimit(t *testing.T) {
	tests := []struct {
		shape []int64
		want  string
	}{
		{[]int64{1, 1000000000000}, `input "x": a sample of shape [1000000000000] holds more than 268435456 elements`},
		{[]int64{-1, 1 << 20, 1 << 20}, `input "x": a sample of shape [1048576 1048576] holds more than 268435456 elements`},
		{[]int64{-1, 1 << 40, 1 << 40, 1 << 40}, `holds more than 268435456 elements`},
	}
	for _, tt := range tests {
		_, err := NewRandomSource([]runtime.IOInfo{{Name: "x", DType: tensor.Float, Shape: tt.shape}}, 8)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("shape %v: err = %v, want %q", tt.shape, err, tt.want)
		}
	}
	if _, err := NewRandomSource([]runtime.IOInfo{{Name: "x", DType: tensor.Float, Shape: []int64{-1, 3, 224, 224}}}, 8); err != nil {
		t.Errorf("an ordinary image input is refused: %v", err)
	}
}
