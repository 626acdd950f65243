package calibrate

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// TestResizePILHand pins resizePIL to values worked out by hand from
// Pillow's algorithm (see resize.go).
func TestResizePILHand(t *testing.T) {
	tests := []struct {
		name   string
		src    []uint8
		w, ow  int
		want   []uint8
		reason string
	}{
		// Reducing 4 → 2: scale 2 widens the triangle to support 2.
		// Output 0: center 1, pixels 0..2 at distances 0.5, 0.5, 1.5 →
		// weights 0.75, 0.75, 0.25 → 3/7, 3/7, 1/7: 70·3/7 + 140/7 = 50.
		// Output 1: center 3, pixels 1..3 → 1/7, 3/7, 3/7: 10 + 60 + 90 = 160.
		{"reduce 4 to 2", []uint8{0, 70, 140, 210}, 4, 2, []uint8{50, 160}, ""},
		// Enlarging 2 → 4: support 1. Centers 0.25, 0.75, 1.25, 1.75:
		// weights (1), (0.75, 0.25), (0.25, 0.75), (1).
		{"enlarge 2 to 4", []uint8{0, 100}, 2, 4, []uint8{0, 25, 75, 100}, ""},
		// Same size: untouched.
		{"same", []uint8{3, 1, 4}, 3, 3, []uint8{3, 1, 4}, ""},
		// Reducing 3 → 1: center 1.5, support 3, pixels 0..2 at distances
		// 1, 0, 1 over 3 → weights 2/3, 1, 2/3 → 2/7, 3/7, 2/7 of (8, 16, 32):
		// (2·8 + 3·16 + 2·32)/7 = 128/7 = 18.29 → 18.
		{"reduce 3 to 1", []uint8{8, 16, 32}, 3, 1, []uint8{18}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// As a row (horizontal pass) and as a column (vertical pass).
			if got := resizePIL(tc.src, tc.w, 1, 1, tc.ow, 1); !slices.Equal(got, tc.want) {
				t.Errorf("row: got %v, want %v", got, tc.want)
			}
			if got := resizePIL(tc.src, 1, tc.w, 1, 1, tc.ow); !slices.Equal(got, tc.want) {
				t.Errorf("column: got %v, want %v", got, tc.want)
			}
		})
	}
}

// refResize is an independent, straightforward float64 version of Pillow's
// resampling: weights of the scaled triangle filter over every input
// pixel, normalised, each pass rounded to 8 bits.
func refResize(src []uint8, w, h, c, ow, oh int) []uint8 {
	pass := func(in, out int) [][]float64 {
		res := make([][]float64, out)
		scale := float64(in) / float64(out)
		fs := math.Max(scale, 1)
		for o := range out {
			center := (float64(o) + 0.5) * scale
			var ws []float64
			sum := 0.0
			for i := range in {
				d := math.Abs(float64(i)+0.5-center) / fs
				wt := math.Max(0, 1-d)
				// Pillow only visits pixels whose index is within the
				// rounded support window.
				if i < int(center-fs+0.5) || i >= int(center+fs+0.5) {
					wt = 0
				}
				ws = append(ws, wt)
				sum += wt
			}
			res[o] = make([]float64, len(ws))
			for i := range ws {
				res[o][i] = ws[i] / sum
			}
		}
		return res
	}
	round8 := func(v float64) uint8 { return uint8(math.Max(0, math.Min(255, math.Floor(v+0.5)))) }
	cur := src
	if ow != w {
		k := pass(w, ow)
		next := make([]uint8, ow*h*c)
		for y := range h {
			for o := range ow {
				for ch := range c {
					s := 0.0
					for i, wt := range k[o] {
						s += wt * float64(cur[(y*w+i)*c+ch])
					}
					next[(y*ow+o)*c+ch] = round8(s)
				}
			}
		}
		cur, w = next, ow
	}
	if oh != h {
		k := pass(h, oh)
		next := make([]uint8, w*oh*c)
		for o := range oh {
			for x := range w * c {
				s := 0.0
				for i, wt := range k[o] {
					s += wt * float64(cur[i*w*c+x])
				}
				next[o*w*c+x] = round8(s)
			}
		}
		cur = next
	}
	return cur
}

// TestResizePILReference compares with the float64 reference on random
// images: the fixed-point weights may move a pixel by one unit at most.
func TestResizePILReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := [][4]int{{7, 5, 3, 2}, {16, 9, 5, 5}, {10, 10, 23, 4}, {37, 29, 13, 11}, {5, 8, 5, 3}, {3, 3, 8, 8}}
	for _, s := range sizes {
		for _, c := range []int{1, 3} {
			src := make([]uint8, s[0]*s[1]*c)
			for i := range src {
				src[i] = uint8(r.IntN(256))
			}
			got := resizePIL(src, s[0], s[1], c, s[2], s[3])
			want := refResize(src, s[0], s[1], c, s[2], s[3])
			if len(got) != len(want) {
				t.Fatalf("%v: %d values, want %d", s, len(got), len(want))
			}
			for i := range got {
				if d := int(got[i]) - int(want[i]); d < -1 || d > 1 {
					t.Fatalf("%v c=%d: value %d is %d, reference %d", s, c, i, got[i], want[i])
				}
			}
		}
	}
}

func TestTorchvisionGeometry(t *testing.T) {
	for _, tc := range []struct{ w, h, n, ow, oh int }{
		{500, 375, 256, 341, 256}, // int(256·500/375) = int(341.33)
		{375, 500, 256, 256, 341},
		{256, 256, 224, 224, 224},
		{640, 427, 256, 383, 256}, // 383.70 truncated
	} {
		if ow, oh := shorterSide(tc.w, tc.h, tc.n); ow != tc.ow || oh != tc.oh {
			t.Errorf("shorterSide(%d, %d, %d) = %d×%d, want %d×%d", tc.w, tc.h, tc.n, ow, oh, tc.ow, tc.oh)
		}
	}
	// round((size − crop)/2) with half to even: 33/2 = 16.5 → 16, 35/2 → 18.
	for _, tc := range [][3]int{{256, 224, 16}, {257, 224, 16}, {259, 224, 18}, {224, 224, 0}} {
		if got := centerCropOrigin(tc[0], tc[1]); got != tc[2] {
			t.Errorf("centerCropOrigin(%d, %d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
}

func writePNG(t *testing.T, path string, w, h int, px func(x, y int) color.NRGBA) {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, px(x, y))
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImageSource checks layout, channel order, scaling and normalisation
// on 2×2 images whose pixels encode their position, plus crop and resize.
func TestImageSource(t *testing.T) {
	dir := t.TempDir()
	px := func(k int) func(x, y int) color.NRGBA {
		return func(x, y int) color.NRGBA {
			return color.NRGBA{R: uint8(10*k + x + 2*y), G: uint8(100 + x), B: uint8(200 + y), A: uint8(255 - 50*x)}
		}
	}
	writePNG(t, filepath.Join(dir, "b.png"), 2, 2, px(1))
	writePNG(t, filepath.Join(dir, "a.png"), 2, 2, px(0))
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not an image"), 0o644)
	in := func(shape ...int64) []runtime.IOInfo {
		return []runtime.IOInfo{{Name: "image", DType: tensor.Float, Shape: shape}}
	}
	base := config.Images{Dir: dir, Scale: 255, Layout: "NCHW", Color: "RGB", DType: "float32", File: "c.yaml", Line: 3}

	t.Run("NCHW RGB normalised", func(t *testing.T) {
		im := base
		im.Mean, im.Std = []float64{0.5, 0.25, 0}, []float64{0.5, 2, 1}
		src, err := Open(in(-1, 3, 2, 2), nil, &im)
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.Batch(0, 2)
		if err != nil {
			t.Fatal(err)
		}
		d := got["image"].Data.([]float32)
		// a.png first (sorted), the alpha channel ignored.
		for k := range 2 {
			for y := range 2 {
				for x := range 2 {
					rgb := []float32{float32(10*k + x + 2*y), float32(100 + x), float32(200 + y)}
					for c := range 3 {
						want := (rgb[c]/255 - float32(im.Mean[c])) / float32(im.Std[c])
						if v := d[((k*3+c)*2+y)*2+x]; v != want {
							t.Fatalf("image %d channel %d (%d, %d): %v, want %v", k, c, x, y, v, want)
						}
					}
				}
			}
		}
	})
	t.Run("NHWC BGR raw uint8", func(t *testing.T) {
		im := base
		im.Layout, im.Color, im.DType = "NHWC", "BGR", "uint8"
		src, err := Open([]runtime.IOInfo{{Name: "image", DType: tensor.Uint8, Shape: []int64{1, 2, 2, 3}}}, nil, &im)
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.Batch(1, 2)
		if err != nil {
			t.Fatal(err)
		}
		want := []uint8{200, 100, 10, 200, 101, 11, 201, 100, 12, 201, 101, 13}
		if d := got["image"].Data.([]uint8); !slices.Equal(d, want) {
			t.Fatalf("got %v, want %v", d, want)
		}
	})
	t.Run("grey resize and crop", func(t *testing.T) {
		big := t.TempDir()
		writePNG(t, filepath.Join(big, "x.png"), 6, 4, func(x, y int) color.NRGBA {
			return color.NRGBA{R: uint8(40 * x), G: uint8(50 * y), B: 9, A: 255}
		})
		im := base
		im.Dir, im.Color, im.Resize, im.Crop = big, "L", []int{2}, []int{2}
		src, err := Open(in(1, 1, 2, 2), nil, &im)
		if err != nil {
			t.Fatal(err)
		}
		got, err := src.Batch(0, 1)
		if err != nil {
			t.Fatal(err)
		}
		// Independently: luma, then the reference resize to 3×2 (shorter
		// side 2), then the centre 2×2 (left offset round(0.5) = 0).
		lum := make([]uint8, 24)
		for y := range 4 {
			for x := range 6 {
				lum[y*6+x] = uint8((19595*uint32(40*x) + 38470*uint32(50*y) + 7471*9 + 0x8000) >> 16)
			}
		}
		r := refResize(lum, 6, 4, 1, 3, 2)
		want := []float32{float32(r[0]) / 255, float32(r[1]) / 255, float32(r[3]) / 255, float32(r[4]) / 255}
		d := got["image"].Data.([]float32)
		for i := range want {
			if math.Abs(float64(d[i]-want[i])) > 1.0/255+1e-6 {
				t.Fatalf("got %v, want %v (±1/255)", d, want)
			}
		}
	})
	t.Run("checked up front", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			inputs []runtime.IOInfo
			edit   func(*config.Images)
			want   string
		}{
			{"size", in(-1, 3, 224, 224), func(im *config.Images) { im.Crop = []int{2} }, `input "image": calibration.images (c.yaml:3) makes 2×2 images`},
			{"channels", in(-1, 1, 2, 2), func(*config.Images) {}, "3-channel"},
			{"dtype", []runtime.IOInfo{{Name: "image", DType: tensor.Float16, Shape: []int64{-1, 3, 2, 2}}}, func(*config.Images) {}, "the model wants float16"},
			{"rank", in(-1, 12), func(*config.Images) {}, "rank-4"},
			{"which input", append(in(-1, 3, 2, 2), runtime.IOInfo{Name: "mask", DType: tensor.Float}), func(*config.Images) {}, "name it with the input key"},
			{"no files", in(-1, 3, 2, 2), func(im *config.Images) { im.Dir, im.Glob = "", filepath.Join(dir, "*.jpg") }, "no image files"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				im := base
				tc.edit(&im)
				if _, err := Open(tc.inputs, nil, &im); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
			})
		}
	})
	t.Run("sizes differ without crop", func(t *testing.T) {
		mixed := t.TempDir()
		writePNG(t, filepath.Join(mixed, "a.png"), 2, 2, px(0))
		writePNG(t, filepath.Join(mixed, "b.png"), 3, 2, px(0))
		im := base
		im.Dir = mixed
		src, err := Open(in(-1, 3, -1, -1), nil, &im)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Batch(0, 2); err == nil || !strings.Contains(err.Error(), "b.png") {
			t.Fatalf("error %v, want one naming b.png", err)
		}
	})
}

// TestProgress checks the bar on a terminal and the log records every 10%
// (or 10 s) elsewhere.
func TestProgress(t *testing.T) {
	events := func(total int, step time.Duration) []Progress {
		var out []Progress
		for i := 1; i <= total; i++ {
			out = append(out, Progress{Batch: i, Batches: total, Samples: i, Total: total, Elapsed: time.Duration(i) * step})
		}
		return out
	}
	t.Run("terminal", func(t *testing.T) {
		var b bytes.Buffer
		p := NewProgressReporter(&b, true, nil)
		for _, e := range events(4, time.Second) {
			p.Report(e)
		}
		p.Done()
		out := b.String()
		if n := strings.Count(out, "\r"); n != 4 {
			t.Errorf("%d redraws, want 4:\n%q", n, out)
		}
		last := out[strings.LastIndex(out, "\r")+1:]
		if !strings.Contains(last, "100% 4/4 samples  1.0 samples/s  ETA 0:00") || !strings.HasSuffix(out, "\n") {
			t.Errorf("last line %q", last)
		}
	})
	t.Run("terminal throttled", func(t *testing.T) {
		var b bytes.Buffer
		p := NewProgressReporter(&b, true, nil)
		for _, e := range events(100, time.Millisecond) {
			p.Report(e)
		}
		// First draw, one every 100 ms of 100 ms, and the final one.
		if n := strings.Count(b.String(), "\r"); n > 3 {
			t.Errorf("%d redraws in 100 ms", n)
		}
	})
	for _, tc := range []struct {
		name  string
		step  time.Duration
		total int
		want  int
	}{{"every tenth", time.Millisecond, 100, 10}, {"every 10 s", 4 * time.Second, 2500, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			p := NewProgressReporter(&b, false, slog.New(slog.NewTextHandler(&b, nil)))
			for _, e := range events(tc.total, tc.step) {
				p.Report(e)
			}
			lines := strings.Count(b.String(), "msg=calibrating")
			if tc.name == "every tenth" && lines != tc.want {
				t.Errorf("%d records, want %d:\n%s", lines, tc.want, b.String())
			}
			if tc.name == "every 10 s" {
				// 2500 events 4 s apart: a record at least every 10 s of
				// progress (every third event), never two within 10 s
				// unless a tenth was crossed.
				if lines < 2500*4/12 || lines > 2500*4/10+10 {
					t.Errorf("%d records over %v", lines, time.Duration(tc.total)*tc.step)
				}
			}
			if strings.Contains(b.String(), "\r") {
				t.Error("a bar was drawn in a log")
			}
		})
	}
}
