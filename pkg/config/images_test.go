package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestImagesBlock(t *testing.T) {
	cfg, err := Parse([]byte(`
calibration:
  images:
    dir: calib
    input: image
    resize: 256
    crop: [224, 200]
    mean: [0.485, 0.456, 0.406]
    std: [0.229, 0.224, 0.225]
    layout: NHWC
    color: BGR
    dtype: float16
  samples: 16
`), filepath.Join("cfg", "c.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Images{Dir: filepath.Join("cfg", "calib"), Input: "image", Resize: []int{256}, Crop: []int{224, 200}, Scale: 255,
		Mean: []float64{0.485, 0.456, 0.406}, Std: []float64{0.229, 0.224, 0.225}, Layout: "NHWC", Color: "BGR", DType: "float16",
		File: filepath.Join("cfg", "c.yaml"), Line: 4}
	if got := cfg.FileSettings.Images; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	st, err := cfg.Settings(Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Images != cfg.FileSettings.Images || st.Samples != 16 {
		t.Fatalf("settings: images %v, samples %d", st.Images, st.Samples)
	}
	// Defaults: torchvision's ToTensor scale, NCHW, RGB, float32.
	cfg, err = Parse([]byte("calibration:\n  images: {glob: \"x/*.png\"}\n"), "d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if im := cfg.FileSettings.Images; im.Glob != filepath.Join("x", "*.png") || im.Scale != 255 || im.Layout != "NCHW" || im.Color != "RGB" || im.DType != "float32" {
		t.Fatalf("defaults: %+v", im)
	}
}

func TestImagesBlockErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "calibration:\n  images:\n    dir: a\n    mena: [1]\n", `bad.yaml:4:5: unknown key "mena" in calibration.images`},
		{"hint", "calibration:\n  images:\n    dir: a\n    layout: NCWH\n", `did you mean "NCHW"`},
		{"dir and glob", "calibration:\n  images:\n    dir: a\n    glob: b\n", "bad.yaml:3:5: calibration.images: give exactly one of dir and glob"},
		{"neither", "calibration:\n  images: {crop: 3}\n", "exactly one of dir and glob"},
		{"mean length", "calibration:\n  images: {dir: a, mean: [1, 2]}\n", "calibration.images.mean has 2 values; color RGB has 3 channels"},
		{"zero std", "calibration:\n  images: {dir: a, std: [1, 0, 1]}\n", "has a zero"},
		{"crop size", "calibration:\n  images: {dir: a, crop: [1, 2, 3]}\n", "want N or [height, width]"},
		{"negative resize", "calibration:\n  images: {dir: a, resize: -3}\n", "must be positive"},
		{"uint8 mean", "calibration:\n  images: {dir: a, dtype: uint8, mean: 0.5}\n", "raw pixels"},
		{"dtype", "calibration:\n  images: {dir: a, dtype: float64}\n", `dtype "float64": want one of`},
		{"not a mapping", "calibration:\n  images: [a]\n", "calibration.images: want a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text), "bad.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
