package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Images is the calibration.images block: image files turned into model
// input tensors the way torchvision's classic ImageNet pipeline does it
// (Resize, CenterCrop, ToTensor, Normalize):
//
//	calibration:
//	  images:
//	    dir: calib/            # or glob: "calib/*.jpg"
//	    input: image           # the model input fed (default: the only one)
//	    resize: 256            # shorter side to 256; [h, w] resizes exactly
//	    crop: 224              # centre crop; [h, w] for a rectangle
//	    scale: 255             # value = (pixel/scale − mean[c]) / std[c]
//	    mean: [0.485, 0.456, 0.406]
//	    std: [0.229, 0.224, 0.225]
//	    layout: NCHW           # or NHWC
//	    color: RGB             # RGB, BGR or L (grey, ITU-R 601-2 luma)
//	    dtype: float32         # float32, float16 or uint8 (raw pixels)
type Images struct {
	// Dir and Glob select the files (one of them; paths resolved against
	// the config file's directory).
	Dir, Glob string
	Input     string
	// Resize is empty, [shorter side] or [h, w]; Crop is empty, [side] or
	// [h, w].
	Resize, Crop []int
	Scale        float64
	Mean, Std    []float64
	Layout       string
	Color        string
	DType        string
	// File and Line locate the block for messages.
	File string
	Line int
}

// Where is "file:line" of the block.
func (im *Images) Where() string { return fmt.Sprintf("%s:%d", im.File, im.Line) }

// Channels is the number of channels the color mode produces.
func (im *Images) Channels() int {
	if im.Color == "L" {
		return 1
	}
	return 3
}

func (d *decoder) images(cfg *Config, n *yaml.Node) *Images {
	if isNull(n) || !d.wantMapping(n, "calibration.images") {
		return nil
	}
	im := &Images{Scale: 255, Layout: "NCHW", Color: "RGB", DType: "float32", File: d.file, Line: n.Line}
	var meanNode, stdNode *yaml.Node
	for _, e := range d.mapping(n) {
		if !d.known(e, "calibration.images", imageFields) {
			continue
		}
		k := e.key.Value
		what := "calibration.images." + k
		switch k {
		case "dir", "glob", "input":
			s, ok := d.str(e.val, what)
			if !ok {
				continue
			}
			switch k {
			case "dir":
				im.Dir = cfg.path(s)
			case "glob":
				im.Glob = cfg.path(s)
			default:
				im.Input = s
			}
		case "resize", "crop":
			sz := d.size(e.val, what)
			if k == "resize" {
				im.Resize = sz
			} else {
				im.Crop = sz
			}
		case "scale":
			if f, ok := d.number(e.val, what); ok {
				if f <= 0 {
					d.errorf(e.val, "", "%s must be positive, got %g", what, f)
				}
				im.Scale = f
			}
		case "mean", "std":
			list := d.numbers(e.val, what)
			if k == "mean" {
				im.Mean, meanNode = list, e.val
			} else {
				im.Std, stdNode = list, e.val
				for _, v := range list {
					if v == 0 {
						d.errorf(e.val, "", "%s has a zero: values are divided by it", what)
					}
				}
			}
		case "layout", "color", "dtype":
			s, ok := d.str(e.val, what)
			if !ok {
				continue
			}
			valid := map[string][]string{"layout": imageLayouts, "color": imageColors, "dtype": imageDTypes}[k]
			found := false
			for _, v := range valid {
				found = found || v == s
			}
			if !found {
				d.errorf(e.val, didYouMean(s, valid), "%s %q: want one of %v", what, s, valid)
				continue
			}
			switch k {
			case "layout":
				im.Layout = s
			case "color":
				im.Color = s
			default:
				im.DType = s
			}
		default:
			d.unread(e)
		}
	}
	if (im.Dir == "") == (im.Glob == "") {
		d.errorf(n, "", "calibration.images: give exactly one of dir and glob")
	}
	for _, c := range []struct {
		node *yaml.Node
		list []float64
		name string
	}{{meanNode, im.Mean, "mean"}, {stdNode, im.Std, "std"}} {
		if c.node != nil && len(c.list) != 1 && len(c.list) != im.Channels() {
			d.errorf(c.node, "", "calibration.images.%s has %d values; color %s has %d channels (or give one value for all)",
				c.name, len(c.list), im.Color, im.Channels())
		}
	}
	if im.DType == "uint8" && (im.Mean != nil || im.Std != nil) {
		d.errorf(n, "", "calibration.images: dtype uint8 feeds raw pixels; mean and std need a float dtype")
	}
	return im
}

// size reads N or [h, w] of positive integers.
func (d *decoder) size(n *yaml.Node, what string) []int {
	v := deref(n)
	var out []int
	if v != nil && v.Kind == yaml.SequenceNode {
		if len(v.Content) != 2 {
			d.errorf(n, "", "%s: want N or [height, width], got %d values", what, len(v.Content))
			return nil
		}
		for _, item := range v.Content {
			if i, ok := d.integer(item, what); ok {
				out = append(out, i)
			}
		}
	} else if i, ok := d.integer(n, what+" (N or [height, width])"); ok {
		out = []int{i}
	}
	for _, i := range out {
		if i <= 0 {
			d.errorf(n, "", "%s must be positive, got %d", what, i)
			return nil
		}
	}
	return out
}

// numbers reads a number or a list of numbers.
func (d *decoder) numbers(n *yaml.Node, what string) []float64 {
	v := deref(n)
	if v != nil && v.Kind == yaml.SequenceNode {
		out := []float64{}
		for _, item := range v.Content {
			if f, ok := d.number(item, what); ok {
				out = append(out, f)
			}
		}
		return out
	}
	if f, ok := d.number(n, what); ok {
		return []float64{f}
	}
	return nil
}
