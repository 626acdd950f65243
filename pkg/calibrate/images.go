package calibrate

import (
	"fmt"
	"image"
	"image/color"
	_ "image/jpeg" // decoders registered with image.Decode
	_ "image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/webp"

	"github.com/coreaiq/coreaiq/pkg/config"
	"github.com/coreaiq/coreaiq/pkg/onnxgraph"
	"github.com/coreaiq/coreaiq/pkg/runtime"
	"github.com/coreaiq/coreaiq/pkg/tensor"
)

// imageExts are the file types ImageSource reads from a directory.
var imageExts = []string{".jpg", ".jpeg", ".png", ".bmp", ".webp"}

// ImageSource turns image files into one model input, one image per
// sample, with the preprocessing of a config's calibration.images block:
// decode to 8-bit RGB (alpha dropped, as PIL's convert("RGB")), optional
// grey conversion, Pillow-exact bilinear resize, centre crop, then
// value = (pixel/scale − mean[c]) / std[c] in float32, as torchvision's
// ToTensor and Normalize compute it.
//
// JPEG decoding is Go's image/jpeg, whose IDCT and chroma upsampling may
// differ from libjpeg's by a unit or two in some pixels; PNG, BMP and WebP
// (lossless) decode identically.
type ImageSource struct {
	im    *config.Images
	in    runtime.IOInfo
	files []string
	dt    tensor.DType
	// h and w are the sample's height and width when the block fixes them
	// (crop, or resize to [h, w]); 0 when they follow each image.
	h, w int
}

// OpenImages lists the image files and checks the block against the model
// input it feeds: rank 4, dtype, channels and, when both are known, height
// and width. Errors name the input and the block's file:line.
func OpenImages(inputs []runtime.IOInfo, im *config.Images) (*ImageSource, error) {
	s := &ImageSource{im: im}
	where := "calibration.images (" + im.Where() + ")"
	switch {
	case im.Input != "":
		i := slices.IndexFunc(inputs, func(in runtime.IOInfo) bool { return in.Name == im.Input })
		if i < 0 {
			return nil, fmt.Errorf("%s: input %q is not a model input (inputs: %s)", where, im.Input, inputNames(inputs))
		}
		s.in = inputs[i]
	case len(inputs) == 1:
		s.in = inputs[0]
	default:
		return nil, fmt.Errorf("%s: the model has %d inputs (%s); images feed one: name it with the input key", where, len(inputs), inputNames(inputs))
	}
	if len(inputs) > 1 {
		return nil, fmt.Errorf("%s: images feed input %q, but the model has other inputs (%s) with no data", where, s.in.Name, inputNames(inputs))
	}
	s.dt = map[string]tensor.DType{"float32": tensor.Float, "float16": tensor.Float16, "uint8": tensor.Uint8}[im.DType]
	if s.dt != s.in.DType {
		return nil, fmt.Errorf("input %q: %s makes %s tensors (dtype: %s), the model wants %s", s.in.Name, where, s.dt, im.DType, s.in.DType)
	}
	switch {
	case len(im.Crop) == 1:
		s.h, s.w = im.Crop[0], im.Crop[0]
	case len(im.Crop) == 2:
		s.h, s.w = im.Crop[0], im.Crop[1]
	case len(im.Resize) == 2:
		s.h, s.w = im.Resize[0], im.Resize[1]
	}
	if s.in.Shape != nil {
		if len(s.in.Shape) != 4 {
			return nil, fmt.Errorf("input %q: %s makes rank-4 %s tensors, the model input has shape %v", s.in.Name, where, im.Layout, s.in.Shape)
		}
		ch, hh, ww := s.in.Shape[1], s.in.Shape[2], s.in.Shape[3]
		if im.Layout == "NHWC" {
			hh, ww, ch = s.in.Shape[1], s.in.Shape[2], s.in.Shape[3]
		}
		if ch >= 0 && int(ch) != im.Channels() {
			return nil, fmt.Errorf("input %q: %s makes %d-channel %s tensors (color %s), the model input has shape %v",
				s.in.Name, where, im.Channels(), im.Layout, im.Color, s.in.Shape)
		}
		if s.h > 0 && (hh >= 0 && int(hh) != s.h || ww >= 0 && int(ww) != s.w) {
			return nil, fmt.Errorf("input %q: %s makes %d×%d images, the model input has shape %v (%s)", s.in.Name, where, s.h, s.w, s.in.Shape, im.Layout)
		}
	}
	var err error
	if im.Dir != "" {
		entries, err := os.ReadDir(im.Dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		for _, e := range entries {
			if !e.IsDir() && slices.Contains(imageExts, strings.ToLower(filepath.Ext(e.Name()))) {
				s.files = append(s.files, filepath.Join(im.Dir, e.Name()))
			}
		}
	} else {
		var m []string
		if m, err = filepath.Glob(im.Glob); err != nil {
			return nil, fmt.Errorf("%s: glob %q: %w", where, im.Glob, err)
		}
		for _, p := range m {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				s.files = append(s.files, p)
			}
		}
	}
	slices.Sort(s.files)
	if len(s.files) == 0 {
		return nil, fmt.Errorf("%s: no image files (%s) in %s", where, strings.Join(imageExts, ", "), im.Dir+im.Glob)
	}
	// Every header is read now, so that a bad or oversized file is refused
	// before calibration starts rather than in the middle of it.
	for _, path := range s.files {
		if err := checkImageHeader(path); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return s, nil
}

// checkImageHeader reads one image's header and checks its size.
func checkImageHeader(path string) error {
	if err := onnxgraph.CheckRegularFile(path); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cfg, format, err := image.DecodeConfig(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := checkImageSize(cfg.Width, cfg.Height); err != nil {
		return fmt.Errorf("%s: the %s header says %w", path, format, err)
	}
	return nil
}

func inputNames(inputs []runtime.IOInfo) string {
	names := make([]string, len(inputs))
	for i, in := range inputs {
		names[i] = in.Name
	}
	return strings.Join(names, ", ")
}

// Samples implements Source.
func (s *ImageSource) Samples() int { return len(s.files) }

// Random implements Source.
func (s *ImageSource) Random() bool { return false }

// Close implements Source.
func (s *ImageSource) Close() error { return nil }

// Files lists the images in sample order.
func (s *ImageSource) Files() []string { return s.files }

// Batch implements Source: it decodes the images of the batch.
func (s *ImageSource) Batch(start, end int) (map[string]*tensor.Tensor, error) {
	if start < 0 || end > len(s.files) || start >= end {
		return nil, fmt.Errorf("samples [%d, %d) out of the %d available", start, end, len(s.files))
	}
	var out *tensor.Tensor
	var per, h0, w0 int
	for i := start; i < end; i++ {
		pix, w, h, err := s.load(s.files[i])
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", s.in.Name, err)
		}
		c := s.im.Channels()
		shape := []int{end - start, c, h, w}
		if s.im.Layout == "NHWC" {
			shape = []int{end - start, h, w, c}
		}
		if out == nil {
			if err := checkInput(s.in, s.dt, shape[1:], s.files[i]); err != nil {
				return nil, err
			}
			out, per, h0, w0 = tensor.New(s.dt, shape...), c*h*w, h, w
		} else if h != h0 || w != w0 {
			return nil, fmt.Errorf("input %q: %s is %d×%d (w×h) after preprocessing, %s is %d×%d: images in one batch need one size; give calibration.images a crop or a [h, w] resize",
				s.in.Name, s.files[i], w, h, s.files[start], w0, h0)
		}
		s.store(out, (i-start)*per, pix, w, h)
	}
	return map[string]*tensor.Tensor{s.in.Name: out}, nil
}

// load decodes, converts, resizes and crops one image to 8-bit pixels with
// interleaved channels.
func (s *ImageSource) load(path string) (pix []uint8, w, h int, err error) {
	if err := onnxgraph.CheckRegularFile(path); err != nil {
		return nil, 0, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	img, err := decodeImage(f, path)
	if err != nil {
		return nil, 0, 0, err
	}
	c := s.im.Channels()
	pix, w, h = toPixels(img, c)
	if w == 0 || h == 0 {
		return nil, 0, 0, fmt.Errorf("%s: empty image", path)
	}
	if len(s.im.Resize) > 0 {
		ow, oh := shorterSide(w, h, s.im.Resize[0])
		if len(s.im.Resize) == 2 {
			oh, ow = s.im.Resize[0], s.im.Resize[1]
		}
		if ow <= 0 || oh <= 0 {
			return nil, 0, 0, fmt.Errorf("%s: %d×%d resizes to nothing", path, w, h)
		}
		pix, w, h = resizePIL(pix, w, h, c, ow, oh), ow, oh
	}
	if len(s.im.Crop) > 0 {
		ch, cw := s.im.Crop[0], s.im.Crop[len(s.im.Crop)-1]
		if ch > h || cw > w {
			return nil, 0, 0, fmt.Errorf("%s: %d×%d (after resize) is smaller than the %d×%d crop", path, w, h, cw, ch)
		}
		top, left := centerCropOrigin(h, ch), centerCropOrigin(w, cw)
		out := make([]uint8, cw*ch*c)
		for y := range ch {
			copy(out[y*cw*c:(y+1)*cw*c], pix[((top+y)*w+left)*c:])
		}
		pix, w, h = out, cw, ch
	}
	return pix, w, h, nil
}

// MaxImagePixels is the largest image calibration decodes: 64 megapixels
// (8192×8192), about 256 MB once decoded to RGBA. The header is read
// first, so a file that claims more is refused before any pixel memory is
// allocated.
const MaxImagePixels = 64 << 20

// decodeImage decodes an image after checking its header's size against
// MaxImagePixels. Errors name path.
func decodeImage(r io.ReadSeeker, path string) (image.Image, error) {
	cfg, format, err := image.DecodeConfig(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkImageSize(cfg.Width, cfg.Height); err != nil {
		return nil, fmt.Errorf("%s: the %s header says %w", path, format, err)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	img, _, err := image.Decode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

// checkImageSize refuses sizes that are empty or over MaxImagePixels.
func checkImageSize(w, h int) error {
	switch {
	case w <= 0 || h <= 0:
		return fmt.Errorf("%d×%d pixels: an empty image", w, h)
	case int64(w)*int64(h) > MaxImagePixels:
		return fmt.Errorf("%d×%d pixels, over the limit of %d megapixels", w, h, MaxImagePixels>>20)
	}
	return nil
}

// store writes one image's pixels into t at element offset off, in the
// block's layout, channel order and dtype.
func (s *ImageSource) store(t *tensor.Tensor, off int, pix []uint8, w, h int) {
	c := s.im.Channels()
	nchw := s.im.Layout == "NCHW"
	scale := float32(s.im.Scale)
	mean := make([]float32, c)
	std := make([]float32, c)
	// mean and std are in the tensor's channel order (B, G, R for BGR).
	for ch := range c {
		mean[ch], std[ch] = 0, 1
		if n := len(s.im.Mean); n > 0 {
			mean[ch] = float32(s.im.Mean[min(ch, n-1)])
		}
		if n := len(s.im.Std); n > 0 {
			std[ch] = float32(s.im.Std[min(ch, n-1)])
		}
	}
	for y := range h {
		for x := range w {
			for ch := range c {
				src := ch
				if s.im.Color == "BGR" {
					src = 2 - ch
				}
				p := pix[(y*w+x)*c+src]
				i := off + (y*w+x)*c + ch
				if nchw {
					i = off + (ch*h+y)*w + x
				}
				switch d := t.Data.(type) {
				case []uint8:
					d[i] = p
				case []float32:
					d[i] = (float32(p)/scale - mean[ch]) / std[ch]
				case []uint16:
					d[i] = tensor.Float32ToFloat16((float32(p)/scale - mean[ch]) / std[ch])
				}
			}
		}
	}
}

// toPixels converts an image to 8-bit pixels, c = 3 (RGB, alpha dropped
// without compositing, as PIL's convert("RGB")) or c = 1 (PIL's "L": luma
// (19595·R + 38470·G + 7471·B + 2^15) >> 16, grey images as they are).
func toPixels(img image.Image, c int) ([]uint8, int, int) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	out := make([]uint8, w*h*c)
	gray, isGray := img.(*image.Gray)
	for y := range h {
		for x := range w {
			var r, g, bl uint8
			switch im := img.(type) {
			case *image.YCbCr:
				yi, ci := im.YOffset(b.Min.X+x, b.Min.Y+y), im.COffset(b.Min.X+x, b.Min.Y+y)
				r, g, bl = color.YCbCrToRGB(im.Y[yi], im.Cb[ci], im.Cr[ci])
			case *image.Gray:
				v := im.GrayAt(b.Min.X+x, b.Min.Y+y).Y
				r, g, bl = v, v, v
			default:
				n := color.NRGBAModel.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA)
				r, g, bl = n.R, n.G, n.B
			}
			i := (y*w + x) * c
			if c == 1 {
				if isGray {
					out[i] = gray.GrayAt(b.Min.X+x, b.Min.Y+y).Y
				} else {
					out[i] = uint8((19595*uint32(r) + 38470*uint32(g) + 7471*uint32(bl) + 0x8000) >> 16)
				}
				continue
			}
			out[i], out[i+1], out[i+2] = r, g, bl
		}
	}
	return out, w, h
}
